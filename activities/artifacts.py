"""Activities of GENERATE_ARTIFACT: plan the chunk groups, map them, reduce to the artifact.

With a chat model each group becomes a structured partial answer (validated, citations kept
only when they point into the group); without one, the local methods of
`knowledgeops/learning/artifacts_local.py` collect candidates per group. Partials are stored per
group (`map_reduce.WorkDir`), so a retry pays only for the groups not done. The reduce step merges
them (a model call only for a summary or mind map of several groups), stores the artifact as
the task's output and removes the work directory.
"""

from __future__ import annotations

import asyncio
import math
from typing import TypeVar

from pydantic import BaseModel
from temporalio import activity

from activities.map_reduce import WorkDir, chosen_model, map_groups, plan_task, read_chunks
from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.artifacts import (
    DISCARD_ARTIFACT_WORK,
    MAP_ARTIFACT,
    PLAN_ARTIFACT,
    REDUCE_ARTIFACT,
    ArtifactDone,
    ArtifactKind,
    ArtifactOutput,
    ArtifactPlan,
    ArtifactRequest,
    ArtifactStep,
    MapResult,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.learning import artifacts_local as local
from knowledgeops.learning import artifacts_render as render
from knowledgeops.learning.artifacts_model import GROUP_MODELS, ModelArtifacts
from knowledgeops.runtime.resources import Resources

M = TypeVar("M", bound=BaseModel)

LOCAL_METHODS: dict[str, str] = {
    "summary": "local:sentence-centrality",
    "outline": "local:headings",
    "glossary": "local:key-terms",
    "quiz": "local:cloze",
    "mindmap": "local:headings",
}


class ArtifactActivities:
    def __init__(self, resources: Resources) -> None:
        self.r = resources
        self.outputs = OutputStore(resources.storage)

    def _work(self, task_id: str) -> WorkDir:
        return WorkDir(self.r.storage, self.r.settings.outputs_dir, task_id)

    def _model(self, method: str) -> ModelArtifacts:
        if self.r.chat is None:
            raise bad_input(
                "ChatModelMissing",
                f"this task was planned for {method} but this worker has no chat model: set "
                "CHAT_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY) on every AI worker, or "
                "start the task with method=local",
            )
        return ModelArtifacts(self.r.chat, self.r.settings.chat_input_tokens)

    @activity.defn(name=PLAN_ARTIFACT.name)
    async def plan_artifact(self, req: ArtifactRequest) -> ArtifactPlan:
        model = chosen_model(self.r.chat, req.method)
        plan = await plan_task(
            self.r.live_versions,
            self.r.files,
            self.outputs,
            req.document_id,
            req.task_id,
            self.r.settings.chat_input_tokens,
        )
        method = f"model:{model.model_id}" if model is not None else LOCAL_METHODS[req.kind]
        return ArtifactPlan(method=method, plan=plan)

    @activity.defn(name=MAP_ARTIFACT.name)
    async def map_artifact(self, step: ArtifactStep) -> MapResult:
        req, plan = step.request, step.plan
        work = self._work(req.task_id)
        reader = await read_chunks(self.r.files, req.document_id, plan.version)
        try:
            with model_failures():
                if step.method.startswith("model:"):
                    model = self._model(step.method)
                    k = math.ceil(req.max_items / len(plan.starts)) + 1

                    async def ask(chunks: list[Chunk]) -> tuple[BaseModel, TokenUsage]:
                        return await model.ask_group(req.kind, k, chunks)

                    found = await map_groups(work, reader, plan, GROUP_MODELS[req.kind], ask)
                else:

                    async def collect(chunks: list[Chunk]) -> tuple[local.LocalGroup, TokenUsage]:
                        return await self._collect_group(
                            req.kind, req.max_items, chunks
                        ), TokenUsage()

                    found = await map_groups(work, reader, plan, local.LocalGroup, collect)
        finally:
            reader.close()
        results, reused, usage = found
        return MapResult(groups=len(results), reused=reused, usage=usage)

    async def _collect_group(self, kind: str, k: int, chunks: list[Chunk]) -> local.LocalGroup:
        group = local.LocalGroup()
        if kind in ("summary", "quiz"):
            sentences = local.chunk_sentences(chunks)
            group.sentences = await local.central_sentences(self.r.embedder, sentences, 3 * k)
        if kind in ("glossary", "quiz", "mindmap"):
            group.terms = local.strongest(local.term_stats(chunks), max(50, 5 * k))
        if kind in ("outline", "mindmap"):
            group.headings = local.heading_marks(chunks)
            group.leads = local.leading_sentences(chunks)
        return group

    @activity.defn(name=REDUCE_ARTIFACT.name)
    async def reduce_artifact(self, step: ArtifactStep) -> ArtifactDone:
        req, plan = step.request, step.plan
        work = self._work(req.task_id)
        partials = [await work.load(i) for i in range(len(plan.starts))]
        if any(p is None for p in partials):
            return await self._already_done(req)
        usage = TokenUsage()
        for p in partials:
            assert p is not None
            usage = usage.add(p.usage)
        title = await self._title(req.document_id)
        out = ArtifactOutput(
            task_id=req.task_id,
            document_id=req.document_id,
            kind=req.kind,
            method=step.method,
            usage=usage,
            chunks=plan.chunks,
            groups=len(plan.starts),
            title=title,
            markdown="",
        )
        async with Heartbeater():
            with model_failures():
                if step.method.startswith("model:"):
                    model_type = GROUP_MODELS[req.kind]
                    values = [model_type.model_validate_json(p.value) for p in partials if p]
                    model = self._model(step.method)
                    cost = await model.merge(out, values, req.max_items, plan)
                    out.usage = out.usage.add(cost)
                else:
                    groups = [local.LocalGroup.model_validate_json(p.value) for p in partials if p]
                    await local.merge_local(self.r.embedder, out, groups, req.max_items, title)
        if not _items(out):
            out.notes.append(f"The {out.method} method found nothing to put in a {out.kind}.")
        _render(out)
        size = await asyncio.to_thread(lambda: len(out.model_dump_json()))
        await self.outputs.save(req.task_id, out)
        await work.discard()
        return ArtifactDone(
            items=_items(out), usage=out.usage, method=out.method, output_bytes=size
        )

    @activity.defn(name=DISCARD_ARTIFACT_WORK.name)
    async def discard_artifact_work(self, task_id: str) -> int:
        """Remove a failed or cancelled task's partial results (the stored groups)."""
        return await self._work(task_id).discard()

    async def _already_done(self, req: ArtifactRequest) -> ArtifactDone:
        """A reduce whose completion never reached the server stored the output and removed
        the partials: answer from the output (planning removed any earlier run's)."""
        try:
            raw = await self.outputs.load(req.task_id)
        except OutputNotFoundError:
            raise bad_input(
                "ArtifactWorkMissing",
                f"the partial results of task {req.task_id} are gone (removed by hand or by "
                "cleanup?); start the task again",
            ) from None
        out = ArtifactOutput.model_validate(raw)
        size = len(out.model_dump_json())
        return ArtifactDone(
            items=_items(out), usage=out.usage, method=out.method, output_bytes=size
        )

    async def _title(self, document_id: str) -> str:
        row = await DocumentCatalogue(self.r.db).get(document_id)
        return (row.title or row.filename or document_id) if row else document_id


def _items(out: ArtifactOutput) -> int:
    kind: ArtifactKind = out.kind
    if kind == "summary":
        return len(out.summary.key_points) if out.summary else 0
    if kind == "mindmap":
        return len(out.mindmap.branches) if out.mindmap else 0
    found = {"outline": out.outline, "glossary": out.glossary, "quiz": out.quiz}[kind]
    return len(found or [])


def _render(out: ArtifactOutput) -> None:
    if out.summary is not None:
        out.markdown = render.summary_md(out.summary)
    elif out.outline is not None:
        out.markdown = render.outline_md(out.outline)
    elif out.glossary is not None:
        out.markdown = render.glossary_md(out.glossary)
    elif out.quiz is not None:
        out.markdown = render.quiz_md(out.quiz)
    elif out.mindmap is not None:
        out.markdown = render.mindmap_md(out.mindmap)
        out.mermaid = render.mermaid(out.mindmap)
