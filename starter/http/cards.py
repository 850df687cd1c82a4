"""Review cards of a document (GENERATE_REVIEW_CARD stores them): listed with their FSRS state.

An owner-bound token sees only its own documents' cards; another owner's document is "not
found", exactly as `GET /v1/documents/{id}` answers it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from knowledgeops.db.review_cards import CardPage, ReviewCards
from starter.http.access import CallerDep, caller
from starter.http.errors import ERROR_RESPONSES
from starter.http.runtime import RuntimeDep
from starter.services.document_models import DocumentNotFoundError

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(caller)])


@router.get("/documents/{document_id}/cards", response_model=CardPage)
async def list_cards(
    rt: RuntimeDep,
    who: CallerDep,
    document_id: str,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> CardPage:
    """The document's cards in document order (source chunk), with `due`, `stability`,
    `difficulty`, `state` and `fsrs_card` (what `fsrs.Card.from_dict` takes)."""
    row = await rt.documents.catalogue.get(document_id)
    if row is None or (who.owner is not None and row.owner != who.owner):
        raise DocumentNotFoundError(f"No document with id {document_id!r}")
    return await ReviewCards(rt.db).list(document_id, limit=limit, offset=offset)
