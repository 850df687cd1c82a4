"""The agent's tools: their schemas as the model sees them and what each one does.

Every tool answers with JSON text for the model. A problem with the model's arguments (bad
JSON, an unknown document, a task type it may not start) is an answer too (`ToolError`): the
model reads it and can correct itself, the task goes on. Tools see only what the task may see:
its `document_ids` and, for a task with an owner, that owner's documents.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from knowledgeops.contracts.agent import ChildStart, ToolName
from knowledgeops.contracts.search import SearchMode
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import validation_text
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.index.points import Scope as IndexScope
from knowledgeops.models.embedding import OnWait
from knowledgeops.registry.task_types import REGISTRY, TaskQueue, TaskType
from knowledgeops.runtime.resources import Resources

MAX_HITS = 20
MAX_READ_CHUNKS = 20
HIT_TEXT_CHARS = 1500
# Types an agent may not start: itself (budgets would multiply), imports (they have their own
# admission and one task id per document) and maintenance that removes or rewrites data.
NOT_STARTABLE = {
    TaskType.AGENT_TASK,
    TaskType.DOCUMENT_IMPORT,
    TaskType.BACKUP_EXECUTE,
    TaskType.CLEANUP_EXECUTE,
}

SYSTEM_PROMPT = (
    "You are the assistant of a personal knowledge base. Answer from the documents in it: "
    "search it, read the chunks you need, and cite what you use as (document_id, chunk "
    "index). If the knowledge base does not hold the answer, say so. Keep answers concise."
)


class ToolError(Exception):
    """Something the model asked for that cannot be done; it is told why."""


@dataclass(frozen=True)
class Scope:
    """What the task may read: these documents (None: all) of this owner (None: anyone's)."""

    document_ids: list[str] | None
    owner: str | None


def startable_types(owner: str | None) -> list[str]:
    """Types an agent may start; an owner's task never starts maintenance."""
    return [
        t.value
        for t, spec in REGISTRY.items()
        if t not in NOT_STARTABLE and not (owner and spec.task_queue == TaskQueue.MAINTENANCE)
    ]


def schemas(tools: list[ToolName], owner: str | None) -> list[dict[str, Any]]:
    """The function definitions offered to the model."""
    defs: dict[str, tuple[str, dict[str, Any], list[str]]] = {
        "search_knowledge_base": (
            "Search the knowledge base; returns the best matching chunks.",
            {
                "query": {"type": "string", "description": "what to look for"},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_HITS},
                "document_id": {"type": "string", "description": "only this document"},
                "mode": {
                    "type": "string",
                    "enum": [m.value for m in SearchMode],
                    "description": "hybrid (default): meaning and exact words; dense: "
                    "meaning only; keyword: exact words only (names, codes, rare terms)",
                },
            },
            ["query"],
        ),
        "read_document": (
            "Read consecutive chunks of one document (chunk indexes start at 0).",
            {
                "document_id": {"type": "string"},
                "start": {"type": "integer", "minimum": 0},
                "count": {"type": "integer", "minimum": 1, "maximum": MAX_READ_CHUNKS},
            },
            ["document_id"],
        ),
        "list_documents": (
            "List the documents in the knowledge base, newest first.",
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "tag": {"type": "string"},
            },
            [],
        ),
        "start_task": (
            "Start another task (e.g. review cards for a document) and wait for its result.",
            {
                "task_type": {"type": "string", "enum": startable_types(owner)},
                "payload": {"type": "object", "description": "the task type's payload"},
            },
            ["task_type", "payload"],
        ),
    }
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": defs[name][0],
                "parameters": {
                    "type": "object",
                    "properties": defs[name][1],
                    "required": defs[name][2],
                },
            },
        }
        for name in tools
    ]


def arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        raise ToolError(f"the arguments are not valid JSON ({e}); send a JSON object") from None
    if not isinstance(args, dict):
        raise ToolError("the arguments must be a JSON object")
    return args


def _int(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ToolError(f"{name} must be an integer from {low} to {high}")
    return value


def _str(args: dict[str, Any], name: str, required: bool = True) -> str | None:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{name} must be a non-empty string")
    return value


class Tools:
    def __init__(self, resources: Resources) -> None:
        self.r = resources
        self.catalogue = DocumentCatalogue(resources.db)

    async def visible(self, scope: Scope) -> list[str] | None:
        """Document ids the task may read (None: every document)."""
        if scope.owner is None:
            return scope.document_ids
        return await self.catalogue.matching_ids(
            owner=scope.owner, document_ids=scope.document_ids or ()
        )

    async def _check_document(self, scope: Scope, document_id: str) -> None:
        allowed = await self.visible(scope)
        if allowed is not None and document_id not in allowed:
            raise ToolError(f"document {document_id!r} is not available to this task")

    async def search_knowledge_base(
        self, args: dict[str, Any], scope: Scope, on_wait: OnWait
    ) -> dict[str, Any]:
        query = _str(args, "query")
        assert query is not None
        k = _int(args, "k", 5, 1, MAX_HITS)
        document_id = _str(args, "document_id", required=False)
        if document_id:
            await self._check_document(scope, document_id)
        mode_name = _str(args, "mode", required=False) or SearchMode.HYBRID.value
        try:
            mode = SearchMode(mode_name)
        except ValueError:
            raise ToolError(
                f"mode {mode_name!r} is not one of {', '.join(m.value for m in SearchMode)}"
            ) from None
        # The owner is a condition of the engine's query (points carry it); no id list needed.
        hits = await self.r.nearest(
            query,
            k,
            IndexScope(document_id=document_id, document_ids=scope.document_ids, owner=scope.owner),
            mode=mode,
            on_wait=on_wait,
        )
        return {
            "hits": [
                {
                    "document_id": h.document_id,
                    "chunk_index": h.chunk_index,
                    "score": round(h.score, 4),
                    "page": h.page,
                    "heading": h.heading,
                    "text": h.text[:HIT_TEXT_CHARS],
                }
                for h in hits
            ]
        }

    async def read_document(self, args: dict[str, Any], scope: Scope) -> dict[str, Any]:
        document_id = _str(args, "document_id")
        assert document_id is not None
        start = _int(args, "start", 0, 0, 10**9)
        count = _int(args, "count", 5, 1, MAX_READ_CHUNKS)
        await self._check_document(scope, document_id)
        version = await self.r.live_versions.get(document_id)

        def read() -> tuple[int, list[Any]]:
            reader = ChunkReader(self.r.settings.chunks_dir, document_id, version)
            try:
                return reader.count, reader.read(start, start + count)
            finally:
                reader.close()

        try:
            # From the store, when another machine chunked it (STORAGE_URL).
            await self.r.files.fetch_version(document_id, version)
            total, chunks = await asyncio.to_thread(read)
        except (FileNotFoundError, ValueError):
            raise ToolError(
                f"document {document_id!r} has no stored chunks (unknown, or not imported yet); "
                "use list_documents to see what exists"
            ) from None
        return {
            "document_id": document_id,
            "total_chunks": total,
            "chunks": [
                {"index": c.index, "page": c.page, "heading": c.heading, "text": c.text}
                for c in chunks
            ],
        }

    async def list_documents(self, args: dict[str, Any], scope: Scope) -> dict[str, Any]:
        limit = _int(args, "limit", 20, 1, 100)
        tag = _str(args, "tag", required=False)
        rows, total = await self.catalogue.list(
            limit=limit,
            owner=scope.owner,
            tags=[tag] if tag else (),
            document_ids=scope.document_ids or (),
        )
        return {
            "total": total,
            "documents": [
                {
                    "document_id": r.document_id,
                    "title": r.title,
                    "filename": r.filename,
                    "status": r.status,
                    "chunks": r.indexed_chunks,
                    "tags": r.tags,
                }
                for r in rows
            ],
        }

    def start_task(self, args: dict[str, Any], owner: str | None) -> ChildStart:
        """Validate what the model asked to start; the workflow starts it as a child."""
        task_type = _str(args, "task_type")
        allowed = startable_types(owner)
        if task_type not in allowed:
            raise ToolError(f"task_type must be one of {', '.join(allowed) or '(none)'}")
        payload = args.get("payload")
        if not isinstance(payload, dict):
            raise ToolError("payload must be a JSON object")
        spec = REGISTRY[TaskType(task_type)]
        try:
            model = spec.payload_model.model_validate(payload)
        except ValidationError as e:
            raise ToolError(f"invalid {task_type} payload: {validation_text(e.errors())}") from None
        size = len(model.model_dump_json())
        if size > self.r.settings.payload_max_bytes:
            raise ToolError(
                f"the payload is {size} bytes, over {self.r.settings.payload_max_bytes}; pass "
                "ids of stored content, not the content"
            )
        return ChildStart(task_type=task_type, payload=model.model_dump(mode="json"))
