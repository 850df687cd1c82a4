"""No text is embedded twice: embeddings are kept by (model, content hash) in the shared index
storage and reused by duplicate submissions, re-imports, edited copies under a new document id
and the same text in another document. Measured from outside, by the OpenAI-compatible test
server that records every input it was billed for."""

from __future__ import annotations

import asyncio
from pathlib import Path

from knowledgeops.config.settings import Settings
from tests.helpers.documents import edited_copy, numbered_paragraphs, varied_paragraphs
from tests.helpers.environment import openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI

WAIT = 90.0


async def test_no_text_is_embedded_twice(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    original = numbered_paragraphs(60)
    paragraphs = original.split("\n\n")
    edited = list(paragraphs)
    edited[10] = "An edited paragraph about river deltas and their sediment."
    edited[40] = "Another edited paragraph, on harbour cranes and shipping lanes."
    files = {
        "a.txt": original,
        "a-edited.txt": "\n\n".join(edited),
        # The same paragraphs in another document, with one of its own.
        "b.txt": "\n\n".join([*paragraphs[:20], "A paragraph only document b has."]),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    # Small chunks: about one paragraph each, so an edit changes few chunks.
    small = openai_settings(settings, fake_openai, chunk_tokens=64, chunk_overlap=0)
    async with running_env(small) as env:

        async def run(name: str, doc: str) -> dict[str, int]:
            ref = await env.documents.import_file(tmp_path / name, document_id=doc)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            assert st.status == "completed" and st.result is not None, st.last_error
            return st.result  # type: ignore[return-value]

        first = await run("a.txt", "a")
        total = first["total_chunks"]
        assert total >= 50 and first["embedded"] == total
        # A duplicate submission of the same import while it is queued or running is the
        # same task; submitted together, they still pay once.
        refs = await asyncio.gather(
            *(env.documents.import_file(tmp_path / "a.txt", document_id="a2") for _ in range(3))
        )
        assert len({r.task_id for r in refs}) == 1
        dup_status = await env.service.wait(refs[0].task_id, timeout=WAIT)
        dup = dup_status.result
        assert dup is not None and dup["embedded"] == 0
        # A re-import of the same document.
        again = await run("a.txt", "a")
        assert (again["embedded"], again["reused"]) == (0, total)
        # An edited copy under a new document id pays for the edited chunks only.
        copy = await run("a-edited.txt", "a-edited")
        assert 1 <= copy["embedded"] <= 4, copy
        # The same paragraphs in another document.
        other = await run("b.txt", "b")
        assert 1 <= other["embedded"] <= 2, other

        billed, unique = fake_openai.embedded_count(), len(set(fake_openai.inputs))
        print(f"\nbilled={billed} unique={unique} ratio={billed / unique:.2f}")
        assert billed == unique, "some text was embedded twice"
        # Every document is whole in the index.
        for doc, result in (("a", again), ("a-edited", copy), ("b", other), ("a2", dup)):
            assert await env.points(doc) == result["total_chunks"]


async def test_an_edited_copy_pays_for_the_chunks_near_its_edits(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 29's edit through the import, at the default chunk size: a copy of a 1,200-paragraph
    document with one paragraph inserted near the start and the middle one rewritten. Chunk
    boundaries follow the text, so the copy's other chunks are the original's, embeddings and
    all (greedy packing re-cut every chunk after the insertion until it realigned: 7 here)."""
    paragraphs = varied_paragraphs(1200)
    (tmp_path / "long.txt").write_text("\n\n".join(paragraphs) + "\n")
    (tmp_path / "long-edited.txt").write_text("\n\n".join(edited_copy(paragraphs)) + "\n")
    default = openai_settings(settings, fake_openai, chunk_tokens=512, chunk_overlap=64)
    async with running_env(default) as env:
        results = []
        for name, doc in (("long.txt", "long"), ("long-edited.txt", "long-edited")):
            ref = await env.documents.import_file(tmp_path / name, document_id=doc)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            assert st.status == "completed" and st.result is not None, st.last_error
            results.append(st.result)
        first, copy = results
        assert first["embedded"] == first["total_chunks"] > 200
        print(f"\nedited copy: embedded={copy['embedded']} of {copy['total_chunks']}")
        assert copy["embedded"] <= 4
        assert copy["reused"] == copy["total_chunks"] - copy["embedded"]
        # Counted by the server that was billed, not by the import's own report.
        assert fake_openai.embedded_count() == first["embedded"] + copy["embedded"]
        assert await env.points("long-edited") == copy["total_chunks"]
