"""What an operator sees of a task in the Temporal Web UI: a summary saying what it is, its
details, the stage it is in, and search attributes to filter by document and owner."""

from __future__ import annotations

from temporalio.api.sdk.v1 import WorkflowMetadata

from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.settings import Settings
from knowledgeops.task_types import (
    DOCUMENT_ID_SEARCH_ATTRIBUTE,
    OWNER_SEARCH_ATTRIBUTE,
    TASK_TYPE_SEARCH_ATTRIBUTE,
    TaskType,
)
from tests.conftest import EXAMPLES, running_env
from tests.helpers import eventually


async def test_a_task_shows_what_it_is_its_stage_and_filters_by_document_and_owner(
    settings: Settings,
) -> None:
    async with running_env(settings) as env:
        meta = DocumentMetadata(owner="alice", title="Spacing")
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt", metadata=meta)
        status = await env.service.wait(ref.task_id, timeout=60)
        assert status.status == "completed", status.last_error
        handle = env.client.get_workflow_handle(ref.task_id)
        desc = await handle.describe()
        assert await desc.static_summary() == "Import spaced-repetition.txt (Spacing)"
        details = await desc.static_details() or ""
        assert f"**Document:** `{ref.document_id}`" in details and "**Owner:** `alice`" in details
        attrs = desc.typed_search_attributes
        assert attrs.get(TASK_TYPE_SEARCH_ATTRIBUTE) == "DOCUMENT_IMPORT"
        assert attrs.get(DOCUMENT_ID_SEARCH_ATTRIBUTE) == ref.document_id
        assert attrs.get(OWNER_SEARCH_ATTRIBUTE) == "alice"

        # The run's current details: what the Web UI shows as where the task is.
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        total = status.progress.total if status.progress else None
        assert total and metadata.current_details == f"completed: {total:,} / {total:,} chunks"

        # A task of another type that was given no summary says what its type does.
        other = await env.service.enqueue(
            TaskType.EMBEDDING_GENERATE, {"document_id": ref.document_id}, owner="bob"
        )
        await env.service.wait(other.task_id, timeout=60)
        other_desc = await env.client.get_workflow_handle(other.task_id).describe()
        assert await other_desc.static_summary() == (
            "EMBEDDING_GENERATE: Embed a stored document's chunks (a range, or every "
            "document's) with a named model into the embedding cache"
        )

        async def listed(query: str) -> list[str]:
            return sorted([w.id async for w in env.client.list_workflows(query)])

        # Filterable by document and by owner (the visibility store settles eventually).
        by_document = f'DocumentId = "{ref.document_id}"'
        found = await eventually(
            lambda: listed(by_document), lambda ids: len(ids) == 2, what=by_document
        )
        assert found == sorted([ref.task_id, other.task_id])
        by_owner = f'DocumentId = "{ref.document_id}" AND Owner = "alice"'
        assert await eventually(lambda: listed(by_owner), bool, what=by_owner) == [ref.task_id]
