"""Re-importing a document: a duplicate submission or a re-import never duplicates points or
pays again for an embedding; a shorter version leaves no stale points; a failed re-import
leaves the previous version answering. Real Temporal dev server, worker and embedded Qdrant."""

from __future__ import annotations

import asyncio
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.db.catalogue import DocumentCatalogue
from starter.services.search import search
from tests.helpers.documents import import_and_wait, numbered_paragraphs
from tests.helpers.environment import openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault

WAIT = 90.0


async def test_reimport_and_duplicate_submission_never_duplicate_or_reembed(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "notes.txt"
    doc.write_text(numbered_paragraphs(60))
    async with running_env(openai_settings(settings, fake_openai)) as env:
        first, dup = await asyncio.gather(
            env.documents.import_file(doc), env.documents.import_file(doc)
        )
        assert (first.task_id, first.run_id) == (dup.task_id, dup.run_id)  # joined, not doubled
        st = await env.service.wait(first.task_id, timeout=WAIT)
        total = st.result["total_chunks"]  # type: ignore[index]
        assert st.result["embedded"] == total  # type: ignore[index]
        paid = fake_openai.embedded_count()
        assert paid == total

        again = await import_and_wait(env, doc)
        assert again.result is not None
        assert (again.result["embedded"], again.result["reused"]) == (0, total)
        assert fake_openai.embedded_count() == paid, "a re-import paid for embeddings again"
        assert await env.points() == total

        # Searched before the change too: the catalogue's reader (a connection kept open) must
        # see the later commit, not the file as it was when it first read.
        before = await search(env.store, env.embedder, "Paragraph 3", k=3, db=env.db)
        assert before and "Renamed" not in {h.title for h in before}
        paid += 1  # the query's embedding
        assert fake_openai.embedded_count() == paid
        # New metadata only: the catalogue changes, the index is not touched.
        retitled = await import_and_wait(env, doc, metadata=_meta("Renamed"))
        assert retitled.result["embedded"] == 0  # type: ignore[index]
        assert fake_openai.embedded_count() == paid
        row = await env.documents.catalogue.get(first.document_id or "")
        assert row is not None and row.title == "Renamed" and row.status == "ready"
        hits = await search(env.store, env.embedder, "Paragraph 3", k=3, db=env.db)
        assert {h.title for h in hits} == {"Renamed"}


def _meta(title: str) -> object:
    from knowledgeops.contracts.document_import import DocumentMetadata

    return DocumentMetadata(title=title)


async def test_reimport_with_fewer_chunks_removes_stale_points(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    long_doc, short_doc = tmp_path / "long.txt", tmp_path / "short.txt"
    long_doc.write_text(numbered_paragraphs(80))
    short_doc.write_text(numbered_paragraphs(20))
    async with running_env(openai_settings(settings, fake_openai)) as env:
        a = await import_and_wait(env, long_doc, document_id="handbook")
        b = await import_and_wait(env, short_doc, document_id="handbook")
        assert a.result and b.result
        n_long, n_short = a.result["total_chunks"], b.result["total_chunks"]
        assert n_short < n_long
        # Publishing the new version removed every point of the old one.
        assert b.result["stale_removed"] == n_long
        assert await env.points("handbook") == n_short
        assert await env.points("handbook", staged=True) == n_short
        # The shared leading chunks were not embedded a second time.
        assert b.result["embedded"] < n_short
        assert b.result["embedded"] + b.result["reused"] == n_short


async def test_failed_reimport_keeps_the_previous_version_searchable(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    old, new = tmp_path / "v1.txt", tmp_path / "v2.txt"
    old.write_text(numbered_paragraphs(30))
    new.write_text(numbered_paragraphs(120, words=55))
    async with running_env(openai_settings(settings, fake_openai, openai_max_retries=0)) as env:
        good = await import_and_wait(env, old, document_id="handbook")
        assert good.result is not None
        n = good.result["total_chunks"]
        first_text = (await env.live_chunks("handbook")).read(0, 1)[0].text
        # The re-import's embedding provider refuses its third request (an outage, a revoked
        # key): two batches were embedded, then the import fails non-retryably.
        before = fake_openai.requests
        fake_openai.fail_on[before + 3] = Fault(401)
        failed = await import_and_wait(env, new, document_id="handbook")
        assert failed.status == "failed" and failed.last_error is not None
        assert failed.last_error.startswith("EmbeddingRejected:"), failed.last_error
        assert fake_openai.requests == before + 3, "two good batches, then the refusal"
        # The previous version is whole and still what search answers from.
        assert await env.points("handbook") == n
        assert await env.points("handbook", staged=True) == n, "staged points were left"
        [hit] = await search(env.store, env.embedder, first_text, k=1)
        assert (hit.document_id, hit.chunk_index, hit.text) == ("handbook", 0, first_text)
        assert (await env.live_chunks("handbook")).count == n
        row = await DocumentCatalogue(env.db).get("handbook")
        assert row is not None and (row.status, row.indexed_chunks) == ("failed", n)
        searched = fake_openai.duplicates()  # the query above is a chunk's text: embedded again
        # Once the provider answers again, the re-import completes and pays only for what the
        # failed attempt had not embedded.
        again = await import_and_wait(env, new, document_id="handbook")
        assert again.status == "completed" and again.result is not None
        assert again.result["reused"] >= 2 * 16
        assert fake_openai.duplicates() == searched == 1, "an embedding was paid twice"
        assert await env.points("handbook", staged=True) == again.result["total_chunks"]
