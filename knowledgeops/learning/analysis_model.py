"""AI_ANALYSIS with a chat model: the prompts, each chunk group's diagnosis (concepts and gaps
kept only when they cite a chunk of the group), merging the groups' diagnoses into one, and
judging a learner's answer against the chunks nearest to it (citations kept only when they
point at a chunk the model was shown).
"""

from __future__ import annotations

from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.analysis import AnswerCheck, Diagnosis
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.learning.analysis_render import diagnosis_text
from knowledgeops.learning.artifacts_model import combine_answers
from knowledgeops.learning.chunk_text import passages
from knowledgeops.models.chat import ChatModel

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


def cited(d: Diagnosis, lo: int, hi: int) -> Diagnosis:
    """Concepts and gaps citing a chunk outside [lo, hi) are invented: left out."""
    return d.model_copy(
        update={
            "key_concepts": [c for c in d.key_concepts if lo <= c.chunk < hi],
            "gaps": [g for g in d.gaps if lo <= g.chunk < hi],
        }
    )


async def diagnose_group(chat: ChatModel, chunks: list[Chunk]) -> tuple[Diagnosis, TokenUsage]:
    """One chunk group's diagnosis, citing only chunks of the group."""
    content = DIAGNOSE_ASK + "\n\n" + passages(chunks)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": content},
    ]
    found, usage = await chat.structured(messages, Diagnosis)
    return cited(found, chunks[0].index, chunks[-1].index + 1), usage


async def merge_diagnoses(
    chat: ChatModel, budget: int, parts: list[Diagnosis], chunks: int
) -> tuple[Diagnosis, TokenUsage]:
    """One diagnosis of the document's `chunks` chunks from its groups' (a model call only
    when there are several), within requests of `budget` tokens."""
    if len(parts) == 1:
        return parts[0], TokenUsage()
    merged, cost = await combine_answers(
        chat,
        budget,
        COMBINE_DIAGNOSES,
        [diagnosis_text(d) for d in parts],
        Diagnosis,
        diagnosis_text,
        SYSTEM,
    )
    return cited(merged, 0, chunks), cost


async def judge_answer(
    chat: ChatModel, question: str | None, answer: str | None, chunks: list[Chunk]
) -> tuple[AnswerCheck, TokenUsage]:
    """The model's verdict on a learner's answer, judged against `chunks` only."""
    content = (
        f"{CHECK_ASK}\n\nQuestion: {question}\n\nLearner's answer: {answer}"
        f"\n\nPassages:\n\n{passages(chunks)}"
    )
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": content},
    ]
    check, usage = await chat.structured(messages, AnswerCheck)
    known = {c.index for c in chunks}
    # A citation of a chunk the model was not shown is invented: left out.
    check.citations = sorted({c for c in check.citations if c in known})
    return check, usage
