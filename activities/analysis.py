"""Activities of AI_ANALYSIS: plan, diagnose a document, check a learner's answer.

A diagnosis goes map-reduce over chunk groups like GENERATE_ARTIFACT (stored partials, a
heartbeat checkpoint per group); without a chat model it is made of key terms and a
readability grade, and says that gaps need a model. An answer check retrieves the document's
chunks nearest to the question and answer and asks the model for a validated verdict whose
citations must be among those chunks. Each activity first looks for the output its own run
already stored (a completion that never reached the server), so nothing is asked twice.
"""

from __future__ import annotations

from temporalio import activity

from activities.map_reduce import (
    WorkDir,
    chosen_model,
    map_groups,
    plan_task,
    read_chunks,
)
from activities.model_errors import model_failures
from activities.support import Heartbeater
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.analysis import (
    CHECK_ANSWER,
    DIAGNOSE_DOCUMENT,
    DISCARD_ANALYSIS_WORK,
    PLAN_ANALYSIS,
    AnalysisDone,
    AnalysisOutput,
    AnalysisPlan,
    AnalysisRequest,
    AnalysisStep,
    Diagnosis,
    Source,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.index.points import Scope
from knowledgeops.learning.analysis_local import (
    LOCAL_METHOD,
    LocalDiagnosisGroup,
    collect_local,
    diagnose_locally,
)
from knowledgeops.learning.analysis_model import (
    ANSWER_SOURCES,
    NO_ANSWER_CHECK_WITHOUT_MODEL,
    diagnose_group,
    judge_answer,
    merge_diagnoses,
)
from knowledgeops.learning.analysis_render import analysis_md
from knowledgeops.models.chat import ChatModel
from knowledgeops.runtime.resources import Resources


class AnalysisActivities:
    def __init__(self, resources: Resources) -> None:
        self.r = resources
        self.outputs = OutputStore(resources.storage)

    @activity.defn(name=PLAN_ANALYSIS.name)
    async def plan_analysis(self, req: AnalysisRequest) -> AnalysisPlan:
        chat = self.r.chat
        if req.mode == "answer" and (chat is None or req.method == "local"):
            raise bad_input("ChatModelMissing", NO_ANSWER_CHECK_WITHOUT_MODEL)
        model = chosen_model(chat, req.method)
        plan = await plan_task(
            self.r.live_versions,
            self.r.files,
            self.outputs,
            req.document_id,
            req.task_id,
            self.r.settings.chat_input_tokens,
        )
        method = f"model:{model.model_id}" if model is not None else LOCAL_METHOD
        return AnalysisPlan(method=method, plan=plan)

    def _work(self, task_id: str) -> WorkDir:
        return WorkDir(self.r.storage, self.r.settings.outputs_dir, task_id)

    def _chat(self, method: str) -> ChatModel:
        if self.r.chat is None:
            raise bad_input(
                "ChatModelMissing",
                f"this task was planned for {method} but this worker has no chat model: set "
                "CHAT_MODEL on every AI worker",
            )
        return self.r.chat

    @activity.defn(name=DIAGNOSE_DOCUMENT.name)
    async def diagnose_document(self, step: AnalysisStep) -> AnalysisDone:
        done = await self._stored(step.request.task_id)
        if done is not None:
            return done
        req, plan = step.request, step.plan
        out = await self._output(step)
        work = self._work(req.task_id)
        reader = await read_chunks(self.r.files, req.document_id, plan.version)
        try:
            with model_failures():
                if step.method.startswith("model:"):
                    chat = self._chat(step.method)

                    async def ask(chunks: list[Chunk]) -> tuple[Diagnosis, TokenUsage]:
                        return await diagnose_group(chat, chunks)

                    diagnoses, _, out.usage = await map_groups(work, reader, plan, Diagnosis, ask)
                    async with Heartbeater():
                        out.diagnosis = await self._merge(chat, out, diagnoses)
                else:

                    async def collect(
                        chunks: list[Chunk],
                    ) -> tuple[LocalDiagnosisGroup, TokenUsage]:
                        return collect_local(chunks), TokenUsage()

                    groups, _, _ = await map_groups(
                        work, reader, plan, LocalDiagnosisGroup, collect
                    )
                    diagnose_locally(out, groups)
        finally:
            reader.close()
        return await self._save(out, work)

    async def _merge(
        self, chat: ChatModel, out: AnalysisOutput, parts: list[Diagnosis]
    ) -> Diagnosis:
        budget = self.r.settings.chat_input_tokens
        merged, cost = await merge_diagnoses(chat, budget, parts, out.chunks)
        out.usage = out.usage.add(cost)
        return merged

    @activity.defn(name=CHECK_ANSWER.name)
    async def check_answer(self, step: AnalysisStep) -> AnalysisDone:
        done = await self._stored(step.request.task_id)
        if done is not None:
            return done
        req = step.request
        chat = self._chat(step.method)
        out = await self._output(step)
        out.question, out.answer = req.question, req.answer
        async with Heartbeater():
            with model_failures():
                query = f"{req.question}\n{req.answer}"
                hits = await self.r.nearest(
                    query, ANSWER_SOURCES, Scope(document_id=req.document_id)
                )
                if not hits:
                    raise bad_input(
                        "DocumentNotIndexed",
                        f"document {req.document_id} has no entries in the live index; "
                        "import it again",
                    )
                hits.sort(key=lambda h: h.chunk_index)
                chunks = [
                    Chunk(index=h.chunk_index, text=h.text, content_hash="", heading=h.heading)
                    for h in hits
                ]
                check, out.usage = await judge_answer(chat, req.question, req.answer, chunks)
        out.answer_check = check
        out.sources = [
            Source(chunk=h.chunk_index, heading=h.heading, score=h.score, text=h.text) for h in hits
        ]
        return await self._save(out, None)

    @activity.defn(name=DISCARD_ANALYSIS_WORK.name)
    async def discard_analysis_work(self, task_id: str) -> int:
        """Remove a failed or cancelled diagnosis's partial results."""
        return await self._work(task_id).discard()

    async def _output(self, step: AnalysisStep) -> AnalysisOutput:
        req = step.request
        row = await DocumentCatalogue(self.r.db).get(req.document_id)
        title = (row.title or row.filename or req.document_id) if row else req.document_id
        return AnalysisOutput(
            task_id=req.task_id,
            document_id=req.document_id,
            title=title,
            mode=req.mode,
            method=step.method,
            usage=TokenUsage(),
            chunks=step.plan.chunks,
            groups=len(step.plan.starts),
            markdown="",
        )

    async def _save(self, out: AnalysisOutput, work: WorkDir | None) -> AnalysisDone:
        out.markdown = analysis_md(out)
        await self.outputs.save(out.task_id, out)
        if work is not None:
            await work.discard()
        return _done(out)

    async def _stored(self, task_id: str) -> AnalysisDone | None:
        """The output this run already stored (planning removed any earlier run's)."""
        try:
            raw = await self.outputs.load(task_id)
        except OutputNotFoundError:
            return None
        return _done(AnalysisOutput.model_validate(raw))


def _done(out: AnalysisOutput) -> AnalysisDone:
    d, check = out.diagnosis, out.answer_check
    return AnalysisDone(
        method=out.method,
        usage=out.usage,
        verdict=check.verdict if check else None,
        difficulty=d.difficulty if d else None,
        concepts=len(d.key_concepts) if d else 0,
        gaps=len(d.gaps) if d else 0,
        citations=check.citations if check else [],
    )
