"""EMBEDDING_GENERATE and INDEXING_UPSERT on the real dev server: the import's embed and upsert
steps as task types, over one document or every document, with a named model and collection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import TaskType
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import Env, openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI

WAIT = 90.0


async def run(env: Env, task_type: TaskType, payload: dict[str, Any]) -> Any:
    ref = await env.service.enqueue(task_type, payload)
    return await env.service.wait(ref.task_id, timeout=WAIT)


async def test_embedding_generate_and_indexing_upsert(settings: Settings, tmp_path: Path) -> None:
    fake = FakeOpenAI(models=("fake-embed", "fake-embed-2")).start()
    try:
        (tmp_path / "a.txt").write_text(numbered_paragraphs(30))
        (tmp_path / "b.txt").write_text(numbered_paragraphs(12, words=20))
        async with running_env(openai_settings(settings, fake)) as env:
            total = 0
            for name in ("a.txt", "b.txt"):
                ref = await env.documents.import_file(tmp_path / name, document_id=name[0])
                st = await env.service.wait(ref.task_id, timeout=WAIT)
                assert st.status == "completed", st.last_error
                total += st.result["total_chunks"]  # type: ignore[index]
            paid = fake.embedded_count()

            # The configured model: everything is in the embedding cache already.
            st = await run(env, TaskType.EMBEDDING_GENERATE, {})
            assert st.status == "completed", st.last_error
            assert st.result["documents"] == 2 and st.result["chunks"] == total
            assert (st.result["embedded"], st.result["reused"]) == (0, total)
            assert (st.progress.unit, st.progress.done, st.progress.total) == ("documents", 2, 2)
            assert fake.embedded_count() == paid

            # Another model: paid once per chunk text, then not again.
            v2 = {"model": "openai:fake-embed-2"}
            st = await run(env, TaskType.EMBEDDING_GENERATE, v2)
            assert (st.result["embedded"], st.result["model"]) == (total, "openai:fake-embed-2")
            assert fake.embedded_count() == paid + total
            st = await run(env, TaskType.EMBEDDING_GENERATE, v2 | {"document_id": "a"})
            assert st.result["embedded"] == 0 and st.result["documents"] == 1

            # A chunk range of one document.
            st = await run(env, TaskType.EMBEDDING_GENERATE, {"document_id": "a", "end_index": 3})
            assert st.result["chunks"] == 3

            # Into a named collection, twice: idempotent, nothing embedded.
            into = v2 | {"collection": "chunks_next"}
            for _ in range(2):
                st = await run(env, TaskType.INDEXING_UPSERT, into)
                assert st.status == "completed", st.last_error
                assert (st.result["documents"], st.result["points"]) == (2, total)
                assert await env.store.count("chunks_next") == total
            assert fake.embedded_count() == paid + total
            # The live collection is untouched.
            assert await env.points() == total

            # A model nothing was embedded with: fails at once, naming the step to run first.
            st = await run(
                env,
                TaskType.INDEXING_UPSERT,
                {"model": "openai:never-used", "collection": "chunks_x", "document_id": "a"},
            )
            assert st.status == "failed" and st.last_error.startswith("VectorsMissing:")
            assert "EMBEDDING_GENERATE" in st.last_error
            # A document that does not exist.
            st = await run(env, TaskType.EMBEDDING_GENERATE, {"document_id": "nope"})
            assert st.status == "failed" and st.last_error.startswith("ChunksMissing:")
    finally:
        fake.stop()
