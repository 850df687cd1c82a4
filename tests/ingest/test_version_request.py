"""PUBLISH_VERSION / DISCARD_VERSION's request: one `purpose` instead of flags, through the
Temporal payload converter both ways between the old shape and the new one (a task still
running scheduled the old one; a worker not yet rolled reads the old one)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from knowledgeops.contracts.document_import import VersionRequest


class OldVersionRequest(BaseModel):
    """The request as the code before `purpose` wrote and read it."""

    document_id: str
    version: str
    collection: str | None = None
    rebuild: bool = False
    staged: bool = True
    only_version: bool = False
    again: bool = False
    source: str | None = None


def through_temporal(value: Any, as_type: type[Any]) -> Any:
    converter = pydantic_data_converter.payload_converter
    return converter.from_payloads(converter.to_payloads([value]), [as_type])[0]


BASE = {"document_id": "doc", "version": "v2", "collection": "chunks_x", "staged": False}


@pytest.mark.parametrize(
    ("old", "purpose", "source", "first_round"),
    [
        ({}, "import", None, False),
        ({"again": True}, "import_again", None, False),
        ({"rebuild": True, "source": "v1", "only_version": True}, "rebuild", "v1", True),
        ({"rebuild": True, "source": "v1"}, "rebuild", "v1", False),
        # Rebuilds scheduled before `source` existed: the old publish read none as "".
        ({"rebuild": True}, "rebuild", "", False),
    ],
)
def test_an_old_request_decodes_to_the_same_purpose(
    old: dict[str, Any], purpose: str, source: str | None, first_round: bool
) -> None:
    req = through_temporal(OldVersionRequest(**BASE, **old), VersionRequest)
    assert (req.purpose, req.source, req.first_round) == (purpose, source, first_round)
    assert (req.document_id, req.version, req.collection, req.staged) == (
        "doc",
        "v2",
        "chunks_x",
        False,
    )


@pytest.mark.parametrize(
    "new",
    [
        VersionRequest(**BASE, purpose="import"),
        VersionRequest(**BASE, purpose="import_again"),
        VersionRequest(**BASE, purpose="rebuild", source="", first_round=True),
    ],
)
def test_a_new_request_round_trips_and_reads_the_same_to_old_code(new: VersionRequest) -> None:
    assert through_temporal(new, VersionRequest) == new
    old = through_temporal(new, OldVersionRequest)
    assert (old.rebuild, old.again, old.only_version, old.source) == (
        new.purpose == "rebuild",
        new.purpose == "import_again",
        new.first_round,
        new.source,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"purpose": "rebuild"},  # a rebuild needs its source
        {"purpose": "import", "source": "v1"},
        {"purpose": "import_again", "first_round": True},
        {"purpose": "publish"},
        # Old flags no code ever wrote together: a first round outside a re-index.
        {"only_version": True},
        {"again": True, "source": "v1"},
    ],
)
def test_impossible_combinations_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        VersionRequest.model_validate(BASE | fields)
