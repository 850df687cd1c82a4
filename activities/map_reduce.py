"""Map-reduce over a document's chunk groups, for the AI activities.

A document longer than one model request is cut into chunk groups (`plan_groups`, bounded by
CHAT_INPUT_TOKENS); each group's partial result is stored in the task's work folder (key
`outputs/work/<task id>/group-<i>.json`, in STORAGE_URL's store, so a retry on another machine
finds it) as soon as it exists, and the heartbeat carries the number of groups done. A retry
after a crash reads finished groups back instead of paying for them again. The work folder goes
when the task completes, fails or is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.support import Heartbeater, resume_from
from knowledgeops.contracts.ai import GroupCheckpoint, GroupPlan, TokenUsage
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk, ChunkReader
from knowledgeops.files.data_files import DataFiles
from knowledgeops.files.outputs import LEGACY_WORK, OutputStore, WorkFiles, check_task_id
from knowledgeops.models.chat import ChatModel
from knowledgeops.models.embedding import token_upper_bound
from knowledgeops.storage.store import Store

P = TypeVar("P", bound=BaseModel)


class Partial(BaseModel):
    """One group's stored result: the value (a kind's partial model, as JSON) and its cost."""

    value: str
    usage: TokenUsage


class WorkDir:
    def __init__(self, storage: Store, outputs_dir: Path, task_id: str) -> None:
        """`outputs_dir`: the data folder's outputs/ (settings.outputs_dir), where a task in
        flight during an upgrade has its earlier partial results."""
        # Checked before it names a key or a folder: a task id has no path separator.
        check_task_id(task_id)
        self.files = WorkFiles(
            storage, f"outputs/work/{task_id}", outputs_dir / LEGACY_WORK / task_id
        )

    async def load(self, i: int) -> Partial | None:
        raw = await self.files.load(_group(i))
        if raw is None:
            return None
        try:
            return Partial.model_validate_json(raw)
        except ValidationError:
            activity.logger.warning(
                "ignoring unreadable partial result %s in %s",
                self.files.key(_group(i)),
                self.files.store.describe(),
            )
            return None

    async def save(self, i: int, partial: Partial) -> None:
        await self.files.save(_group(i), partial.model_dump_json().encode())

    async def discard(self) -> int:
        return await self.files.discard()


def _group(i: int) -> str:
    return f"group-{i}.json"


async def read_chunks(files: DataFiles, document_id: str, version: str | None) -> ChunkReader:
    """`open_chunks`, after fetching the version's chunk files from STORAGE_URL's store when
    this machine does not have them (another one imported the document)."""
    try:
        await files.fetch_version(document_id, version)
    except ValueError as e:  # not a document id or version: the same answer as open_chunks's
        raise _unreadable(document_id, version, e) from None
    return await asyncio.to_thread(open_chunks, files.chunks_dir, document_id, version)


def open_chunks(chunks_dir: Path, document_id: str, version: str | None) -> ChunkReader:
    """The document's chunks of `version` (its live one, from LiveVersions, at the plan); a
    document that does not exist (or changed since the plan) is bad input: retrying cannot
    bring it back."""
    try:
        return ChunkReader(chunks_dir, document_id, version)
    except (FileNotFoundError, ValueError) as e:
        raise _unreadable(document_id, version, e) from None


def _unreadable(document_id: str, version: str | None, e: Exception) -> ApplicationError:
    if version is not None:
        return bad_input(
            "DocumentChanged",
            f"document {document_id} was re-imported or deleted while this task ran ({e}); "
            "start the task again",
        )
    return bad_input(
        "DocumentNotFound",
        f"{e}; import the document first (knowledgeops import FILE) and use its id",
    )


def plan_groups(reader: ChunkReader, document_id: str, budget_tokens: int) -> GroupPlan:
    """Consecutive chunks packed into groups of at most `budget_tokens` (a byte-length bound:
    never an under-count), at least one chunk each."""
    starts: list[int] = []
    used = budget_tokens + 1
    for batch in reader.iter_batches(0, 256):
        for chunk in batch:
            cost = token_upper_bound(chunk.text) + 16  # the "[chunk N]" marker and separators
            if used + cost > budget_tokens:
                starts.append(chunk.index)
                used = 0
            used += cost
    return GroupPlan(
        document_id=document_id, version=reader.version, chunks=reader.count, starts=starts
    )


def chosen_model(chat: ChatModel | None, method: str) -> ChatModel | None:
    """The chat model a task of `method` (auto / model / local) uses, or None for the local
    method; method=model with no model configured fails at once."""
    if method == "model" and chat is None:
        raise bad_input(
            "ChatModelMissing",
            "method=model needs a chat model: set CHAT_MODEL (and OPENAI_BASE_URL / "
            "OPENAI_API_KEY), or use method=auto / local",
        )
    return chat if method != "local" else None


async def plan_task(
    versions: LiveVersions,
    files: DataFiles,
    outputs: OutputStore,
    document_id: str,
    task_id: str,
    budget_tokens: int,
) -> GroupPlan:
    """A map-reduce task's first step: the document's live chunk groups (heartbeating while
    they are planned), and no output of an earlier run of this task (a manual retry replaces
    it)."""
    version = await versions.get(document_id)
    reader = await read_chunks(files, document_id, version)
    try:
        async with Heartbeater():
            plan = await asyncio.to_thread(plan_groups, reader, document_id, budget_tokens)
    finally:
        reader.close()
    if not plan.starts:
        raise bad_input("EmptyDocument", f"document {document_id} has no chunks")
    await outputs.delete(task_id)
    return plan


async def map_groups(
    work: WorkDir,
    reader: ChunkReader,
    plan: GroupPlan,
    partial_type: type[P],
    fn: Callable[[list[Chunk]], Awaitable[tuple[P, TokenUsage]]],
) -> tuple[list[P], int, TokenUsage]:
    """Every group's partial result (stored ones read back), how many were read back, and the
    tokens all groups cost (stored ones included: the task paid for them)."""
    total = len(plan.starts)
    checkpoint = resume_from(GroupCheckpoint(total=total), lambda cp: cp.total == total)
    if checkpoint.done:
        activity.logger.info("resuming after %d of %d chunk groups", checkpoint.done, total)
    results: list[P] = []
    reused = 0
    usage = TokenUsage()
    async with Heartbeater(GroupCheckpoint(total=total).model_dump()) as hb:
        for i in range(total):
            # The stored file, not only the checkpoint, decides: a heartbeat may lag the save.
            stored = await work.load(i)
            if stored is not None:
                value = partial_type.model_validate_json(stored.value)
                reused += 1
                cost = stored.usage
            else:
                start, end = plan.bounds(i)
                chunks = await asyncio.to_thread(reader.read, start, end)
                value, cost = await fn(chunks)
                partial = Partial(value=value.model_dump_json(), usage=cost)
                await work.save(i, partial)
            results.append(value)
            usage = usage.add(cost)
            hb.update(GroupCheckpoint(done=i + 1, total=total, usage=usage).model_dump())
    return results, reused, usage
