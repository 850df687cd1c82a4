"""Activities of AI_ANALYSIS: plan, diagnose a document, check a learner's answer.

A diagnosis goes map-reduce over chunk groups like GENERATE_ARTIFACT (stored partials, a
heartbeat checkpoint per group); without a chat model it is made of key terms and a
readability grade, and says that gaps need a model. An answer check retrieves the document's
chunks nearest to the question and answer and asks the model for a validated verdict whose
citations must be among those chunks. Each activity first looks for the output its own run
already stored (a completion that never reached the server), so nothing is asked twice.
"""

from __future__ import annotations

import re

from pydantic import BaseModel
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
    AnswerCheck,
    Concept,
    Diagnosis,
    Readability,
    Source,
)
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.errors import bad_input
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.index.points import Scope
from knowledgeops.learning import artifacts_local as local
from knowledgeops.learning.artifacts_model import combine_answers
from knowledgeops.learning.chunk_text import passages
from knowledgeops.models.chat import ChatModel
from knowledgeops.runtime.resources import Resources
from knowledgeops.text.terms import words as words_of

LOCAL_METHOD = "local:key-terms+readability"
# Chunks an answer is judged against: the nearest to the question and the answer.
ANSWER_SOURCES = 6
SYSTEM = (
    "You help learners study a document. Judge only by the passages given, never by what you "
    "know otherwise. Each passage starts with [chunk N]: where asked for a chunk, give that N. "
    "Write in the language of the passages."
)
DIAGNOSE_ASK = (
    "Diagnose these passages for a learner: the key concepts (at most 8, each explained in one "
    "sentence, with its chunk), the difficulty (introductory, intermediate or advanced) and "
    "why, the prerequisites a reader needs, and the gaps: what the passages assume or leave "
    "unexplained, each with the chunk where it shows."
)
COMBINE_DIAGNOSES = (
    "These are diagnoses of consecutive parts of one document, in order, with chunk numbers. "
    "Merge them into one diagnosis of the whole document: its key concepts (at most 10), its "
    "overall difficulty and why, the prerequisites, and the gaps, keeping the chunk numbers."
)
CHECK_ASK = (
    "Judge the learner's answer to the question against the passages only: the verdict "
    "(correct, partly or wrong), feedback for the learner, what a complete answer has that "
    "this one lacks, any misconceptions, and the chunks your judgement rests on."
)
NO_ANSWER_CHECK_WITHOUT_MODEL = (
    "checking a learner's answer needs a chat model: set CHAT_MODEL (and OPENAI_BASE_URL / "
    "OPENAI_API_KEY). There is no local method: similarity to the document cannot tell a right "
    "answer from a wrong one"
)
_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)")
_VOWEL_GROUPS = re.compile(r"[aeiouy]+")


class LocalDiagnosisGroup(BaseModel):
    terms: list[local.TermStat]
    sentences: int
    words: int
    syllables: int


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
                        content = DIAGNOSE_ASK + "\n\n" + passages(chunks)
                        messages = [
                            {"role": "system", "content": SYSTEM},
                            {"role": "user", "content": content},
                        ]
                        found, usage = await chat.structured(messages, Diagnosis)
                        return _cited(found, chunks[0].index, chunks[-1].index + 1), usage

                    diagnoses, _, out.usage = await map_groups(work, reader, plan, Diagnosis, ask)
                    async with Heartbeater():
                        out.diagnosis = await self._merge(chat, out, diagnoses)
                else:

                    async def collect(
                        chunks: list[Chunk],
                    ) -> tuple[LocalDiagnosisGroup, TokenUsage]:
                        return _collect_local(chunks), TokenUsage()

                    groups, _, _ = await map_groups(
                        work, reader, plan, LocalDiagnosisGroup, collect
                    )
                    _diagnose_locally(out, groups)
        finally:
            reader.close()
        return await self._save(out, work)

    async def _merge(
        self, chat: ChatModel, out: AnalysisOutput, parts: list[Diagnosis]
    ) -> Diagnosis:
        if len(parts) == 1:
            return parts[0]
        merged, cost = await combine_answers(
            chat,
            self.r.settings.chat_input_tokens,
            COMBINE_DIAGNOSES,
            [diagnosis_text(d) for d in parts],
            Diagnosis,
            diagnosis_text,
            SYSTEM,
        )
        out.usage = out.usage.add(cost)
        return _cited(merged, 0, out.chunks)

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
                content = (
                    f"{CHECK_ASK}\n\nQuestion: {req.question}\n\nLearner's answer: {req.answer}"
                    f"\n\nPassages:\n\n{passages(chunks)}"
                )
                messages = [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": content},
                ]
                check, out.usage = await chat.structured(messages, AnswerCheck)
        known = {h.chunk_index for h in hits}
        # A citation of a chunk the model was not shown is invented: left out.
        check.citations = sorted({c for c in check.citations if c in known})
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


def _cited(d: Diagnosis, lo: int, hi: int) -> Diagnosis:
    """Concepts and gaps citing a chunk outside [lo, hi) are invented: left out."""
    return d.model_copy(
        update={
            "key_concepts": [c for c in d.key_concepts if lo <= c.chunk < hi],
            "gaps": [g for g in d.gaps if lo <= g.chunk < hi],
        }
    )


def _syllables(word: str) -> int:
    groups = len(_VOWEL_GROUPS.findall(word.lower()))
    if word.lower().endswith("e") and groups > 1:
        groups -= 1  # a silent final e
    return max(1, groups)


def _collect_local(chunks: list[Chunk]) -> LocalDiagnosisGroup:
    words = [w for c in chunks for w in words_of(c.text)]
    return LocalDiagnosisGroup(
        terms=local.strongest(local.term_stats(chunks), 50),
        sentences=sum(len(_SENTENCE_END.findall(c.text + " ")) for c in chunks),
        words=len(words),
        syllables=sum(_syllables(w) for w in words),
    )


def _diagnose_locally(out: AnalysisOutput, groups: list[LocalDiagnosisGroup]) -> None:
    terms = local.key_terms([g.terms for g in groups], 10)
    concepts = [Concept(name=t.term, explanation=t.sentence, chunk=t.chunk) for t in terms]
    sentences, words = sum(g.sentences for g in groups), sum(g.words for g in groups)
    syllables = sum(g.syllables for g in groups)
    difficulty, reason = "unknown", "too little English-like text to measure readability"
    if words >= 50 and sentences:
        wps, spw = words / sentences, syllables / words
        grade = round(0.39 * wps + 11.8 * spw - 15.59, 1)
        out.readability = Readability(
            sentences=sentences,
            words=words,
            words_per_sentence=round(wps, 1),
            syllables_per_word=round(spw, 2),
            grade=grade,
        )
        difficulty = "introductory" if grade < 9 else "intermediate" if grade < 13 else "advanced"
        reason = (
            f"Flesch-Kincaid grade {grade} ({wps:.1f} words per sentence, "
            f"{spw:.2f} syllables per word)"
        )
    out.diagnosis = Diagnosis(
        key_concepts=concepts,
        difficulty=difficulty,
        difficulty_reason=reason,
        prerequisites=[],
        gaps=[],
    )
    out.notes.append(
        "Made without a chat model: key concepts are recurring terms with their defining "
        "sentence, difficulty is a readability grade. Prerequisites and gaps need a chat model "
        "(set CHAT_MODEL)."
    )


def diagnosis_text(d: Diagnosis) -> str:
    lines = [f"Difficulty: {d.difficulty} ({d.difficulty_reason})"]
    lines += [f"- concept {c.name} [chunk {c.chunk}]: {c.explanation}" for c in d.key_concepts]
    lines += [f"- prerequisite: {p}" for p in d.prerequisites]
    lines += [f"- gap [chunk {g.chunk}]: {g.description}" for g in d.gaps]
    return "\n".join(lines)


def analysis_md(out: AnalysisOutput) -> str:
    lines = [f"# {out.title}: {'diagnosis' if out.mode == 'diagnosis' else 'answer check'}", ""]
    if out.diagnosis is not None:
        d = out.diagnosis
        lines += [f"**Difficulty:** {d.difficulty} ({d.difficulty_reason})", "", "## Key concepts"]
        lines += [f"- **{c.name}**: {c.explanation} (chunk {c.chunk})" for c in d.key_concepts]
        if d.prerequisites:
            lines += ["", "## Prerequisites", *(f"- {p}" for p in d.prerequisites)]
        if d.gaps:
            lines += ["", "## Gaps", *(f"- {g.description} (chunk {g.chunk})" for g in d.gaps)]
    if out.answer_check is not None:
        a = out.answer_check
        lines += [f"**Question:** {out.question}", "", f"**Answer:** {out.answer}", ""]
        lines += [f"**Verdict:** {a.verdict}", "", a.feedback]
        if a.missing:
            lines += ["", "## Missing", *(f"- {m}" for m in a.missing)]
        if a.misconceptions:
            lines += ["", "## Misconceptions", *(f"- {m}" for m in a.misconceptions)]
        if a.citations:
            lines += ["", "Sources: " + ", ".join(f"chunk {c}" for c in a.citations)]
    return "\n".join(lines) + "\n"
