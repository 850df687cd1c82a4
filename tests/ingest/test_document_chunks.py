"""A document's chunks, readable (GET /v1/documents/{id}/chunks and `documents show --chunks`):
over real HTTP with the real worker and Temporal, checked against what the chunk store holds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fpdf import FPDF
from temporalio.client import Client, WorkflowFailureError

from knowledgeops.config.settings import Settings
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.runtime.temporal import connect
from tests.helpers.documents import live_version_of, numbered_paragraphs
from tests.helpers.environment import API_TOKEN, ROOT, Api, running_api, settings_env

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789ab"
OWNERS = f"{API_TOKEN}:tester,{ALICE_TOKEN}:alice-app:alice,{BOB_TOKEN}:bob-app:bob"
SECTIONS = ["Evaporation", "Condensation", "Precipitation", "Runoff"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def sections_pdf(path: Path) -> Path:
    """One section per page, each in the PDF outline (the parser's headings), each with
    several chunks of distinct text at the tests' CHUNK_TOKENS=64."""
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for i, name in enumerate(SECTIONS):
        pdf.add_page()
        pdf.start_section(name)
        pdf.multi_cell(0, 6, name, new_x="LMARGIN", new_y="NEXT")
        body = numbered_paragraphs(4 + i, words=30).split("\n\n")[i:]
        pdf.multi_cell(0, 6, f"{name}. " + "\n\n".join(body))
    pdf.output(str(path))
    return path


async def finished(client: Client, api: Api, task_id: str) -> str:
    """Wait on the task's result (a long poll, no sleeping), then its status as the API says."""
    with contextlib.suppress(WorkflowFailureError):  # the status says how it ended
        await asyncio.wait_for(client.get_workflow_handle(task_id).result(), 120)
    r = await api.http.get(f"/v1/tasks/{task_id}")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


def error_of(r: Any, status: int) -> tuple[str, str]:
    assert r.status_code == status, r.text
    problem = r.json()
    return str(problem["code"]), str(problem["detail"])


def stored(chunks_dir: Path, document_id: str, version: str) -> list[dict[str, Any]]:
    reader = ChunkReader(chunks_dir, document_id, version)
    try:
        return [
            {"index": c.index, "text": c.text, "page": c.page, "heading": c.heading}
            for c in reader.read(0, reader.count)
        ]
    finally:
        reader.close()


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_chunks_page_through_the_live_version(settings: Settings, tmp_path: Path) -> None:
    async with running_api(settings, api_tokens=OWNERS) as api:
        client = await connect(api.settings)
        http = api.http
        doc = await api.upload(sections_pdf(tmp_path / "water.pdf"), owner="alice")
        bad_pdf = tmp_path / "broken.pdf"
        bad_pdf.write_bytes(b"%PDF-1.7\n garbage that is not a pdf body")
        bad = await api.upload(bad_pdf)
        assert await finished(client, api, doc["task_id"]) == "completed"
        assert await finished(client, api, bad["task_id"]) == "failed"
        doc_id = doc["document_id"]
        path = f"/v1/documents/{doc_id}/chunks"

        # What the store holds: several chunks per section, each with its page and heading.
        version = await live_version_of(settings, doc_id)
        assert version is not None
        expected = stored(settings.chunks_dir, doc_id, version)
        assert len(expected) > 8
        assert {(c["page"], c["heading"]) for c in expected} == {
            (n, name) for n, name in enumerate(SECTIONS, 1)
        }

        # Paging through gives exactly that, in order, whatever the page size.
        for limit in (1, 5, 500):
            seen: list[dict[str, Any]] = []
            offset = 0
            while True:
                r = await http.get(path, params={"offset": offset, "limit": limit})
                assert r.status_code == 200, r.text
                page = r.json()
                assert set(page) == {"document_id", "version", "total", "offset", "limit", "chunks"}
                assert (page["document_id"], page["version"]) == (doc_id, version)
                assert (page["total"], page["offset"], page["limit"]) == (
                    len(expected),
                    offset,
                    limit,
                )
                if not page["chunks"]:
                    break
                assert len(page["chunks"]) == min(limit, len(expected) - offset)
                seen += page["chunks"]
                offset += limit
            assert seen == expected, limit
        r = await http.get(path)  # the defaults: the first 50
        assert (r.json()["offset"], r.json()["limit"], r.json()["chunks"]) == (0, 50, expected)
        detail = (await http.get(f"/v1/documents/{doc_id}")).json()
        assert detail["indexed_chunks"] == len(expected)  # the chunks search answers from

        # Past the end: an empty page that still says how many there are.
        for offset in (len(expected), len(expected) + 1, 2**63 - 1):
            r = await http.get(path, params={"offset": offset, "limit": 10})
            assert r.status_code == 200, r.text
            assert (r.json()["chunks"], r.json()["total"]) == ([], len(expected))
        last = await http.get(path, params={"offset": len(expected) - 1, "limit": 10})
        assert last.json()["chunks"] == expected[-1:]

        # Bad paging parameters are the caller's error, never a 500.
        for params in (
            {"limit": 0},
            {"limit": 501},
            {"offset": -1},
            {"offset": 2**63},
            {"limit": "ten"},
        ):
            r = await http.get(path, params=params)
            assert error_of(r, 422)[0] == "invalid_request", params

        # Unknown documents and another owner's are not found, exactly as their detail is.
        code, message = error_of(await http.get("/v1/documents/doc-nope/chunks"), 404)
        assert code == "not_found" and "doc-nope" in message
        for route in (path, f"/v1/documents/{doc_id}"):
            r = await http.get(route, headers=bearer(BOB_TOKEN))
            assert error_of(r, 404)[0] == "not_found", route
        r = await http.get(path, headers=bearer(ALICE_TOKEN))
        assert r.status_code == 200 and r.json()["chunks"] == expected[:50]

        # Known, but its only import failed: no version was ever published, and it says so.
        r = await http.get(f"/v1/documents/{bad['document_id']}/chunks")
        code, message = error_of(r, 409)
        assert code == "chunks_not_published"
        assert "has no published chunks yet: its import failed" in message
        assert "CorruptDocument" in message and "import the file again" in message

        # The CLI, through the running API as `show` goes.
        environ = settings_env(api.settings)
        args = ["documents", "show", doc_id, "--chunks", "--offset", "3", "--limit", "6"]
        r = await asyncio.to_thread(cli, [*args, "--json"], environ)
        assert r.returncode == 0, r.stderr
        both = json.loads(r.stdout)
        assert both["document"]["document_id"] == doc_id
        assert both["chunks"] == {
            "document_id": doc_id,
            "version": version,
            "total": len(expected),
            "offset": 3,
            "limit": 6,
            "chunks": expected[3:9],
        }
        r = await asyncio.to_thread(cli, args, environ)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert f"document: {doc_id}" in out and "catalogue: ready" in out
        assert f"chunks:   3-8 of {len(expected)} (version {version})" in out
        # Each chunk: its index, page and heading, then its text, indented; in order.
        blocks = out.split("\n\n[")[1:]
        assert len(blocks) == 6, out
        for block, chunk in zip(blocks, expected[3:9], strict=True):
            header, *text = block.rstrip("\n").split("\n")
            assert header == f"{chunk['index']}] page {chunk['page']} | {chunk['heading']}"
            assert text == [f"    {line}" for line in chunk["text"].splitlines()]
        r = await asyncio.to_thread(cli, ["documents", "show", doc_id], environ)
        assert r.returncode == 0, r.stderr
        assert not [line for line in r.stdout.splitlines() if line.startswith("chunks:")]

        failed = ["documents", "show", bad["document_id"], "--chunks"]
        r = await asyncio.to_thread(cli, failed, environ)
        assert r.returncode == 1 and "catalogue: failed" in r.stdout
        assert "has no published chunks yet: its import failed" in r.stderr
        r = await asyncio.to_thread(cli, [*args, "--limit", "0"], environ)
        assert r.returncode == 1 and "limit 1-500" in r.stderr
        as_bob = environ | {"API_TOKEN": BOB_TOKEN}
        r = await asyncio.to_thread(cli, args, as_bob)
        assert r.returncode == 1 and "No document with id" in r.stderr


async def test_a_queued_import_has_no_chunks_yet(settings: Settings, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text(numbered_paragraphs(6))
    # No worker: the import stays queued, the document known only from its task.
    async with running_api(settings, workers=False, api_tokens=OWNERS) as api:
        doc = await api.upload(notes, owner="alice")
        path = f"/v1/documents/{doc['document_id']}/chunks"
        assert (await api.http.get(f"/v1/documents/{doc['document_id']}")).json()["status"] == (
            "queued"
        )
        for token in (API_TOKEN, ALICE_TOKEN):
            code, message = error_of(await api.http.get(path, headers=bearer(token)), 409)
            assert code == "chunks_not_published"
            assert "its import is waiting for a worker" in message
            assert f"they appear when task {doc['task_id']} completes" in message
        r = await api.http.get(path, headers=bearer(BOB_TOKEN))
        assert error_of(r, 404)[0] == "not_found"
