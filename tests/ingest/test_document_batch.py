"""A folder of small documents as one task (DOCUMENT_BATCH_IMPORT), through real HTTP, the real
worker and Temporal dev server, and the OpenAI-compatible test server as the embedder (which
counts every text it is paid for).

Each document stays a document: its own status, chunks, search hits, delete and re-import; a
bad file fails alone with its reason; a bigger file gets its own import (a child task); the
submission is one task whose progress says done / failed of the total, with the failures; the
same folder submitted again duplicates nothing and embeds nothing again; a cancel stops it and
leaves no document half-imported."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.registry.task_types import TaskType
from starter.services.document_batches import DocumentBatchService
from tests.helpers.environment import Api, openai_settings, running_api, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.waiting import eventually

GOOD = 48
# Above SMALL_DOCUMENT_BYTES below: imported by a DOCUMENT_IMPORT of its own.
BIG_BYTES = 3000


def note(i: int) -> str:
    return f"Note {i}: the zebrafish{i} card; review interval {i} days, recall beats rereading.\n"


def write_folder(root: Path) -> list[Path]:
    paths = []
    for i in range(GOOD):
        sub = root / f"week-{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        paths.append(sub / f"note-{i:03d}.md")
        paths[-1].write_text(note(i))
    (root / "empty.txt").write_bytes(b"")
    (root / "broken.pdf").write_bytes(b"%PDF-1.7 this is not a PDF at all")
    big = root / "big.txt"
    big.write_text(("A long river of words about glaciers and moraines. " * 60)[:BIG_BYTES])
    return [*paths, root / "empty.txt", root / "broken.pdf", big]


def multipart(root: Path, paths: list[Path]) -> list[tuple[str, tuple[str, bytes]]]:
    return [("files", (p.relative_to(root).as_posix(), p.read_bytes())) for p in paths]


async def submit(api: Api, root: Path, paths: list[Path]) -> dict[str, Any]:
    r = await api.http.post(
        "/v1/document-batches", files=multipart(root, paths), data={"tags": "folder"}
    )
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    assert r.headers["Location"] == f"/v1/tasks/{body['task_id']}"
    return body


async def documents(api: Api) -> list[dict[str, Any]]:
    r = await api.http.get("/v1/documents", params={"limit": 500})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def test_a_folder_imports_as_one_task_of_separate_documents(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    cfg = openai_settings(settings, fake_openai, small_document_bytes=2000)
    root = tmp_path / "notes"
    paths = write_folder(root)
    async with running_api(cfg) as api:
        body = await submit(api, root, paths)
        assert (body["total"], body["duplicates"]) == (len(paths), 0)
        task = await api.wait_task(body["task_id"])
        assert task["status"] == "completed", task
        assert task["task_type"] == TaskType.DOCUMENT_BATCH_IMPORT.value

        view = (await api.http.get(body["status_url"])).json()
        assert (view["total"], view["done"], view["imported"], view["failed"]) == (51, 51, 49, 2)
        reasons = {f["filename"]: f["error"] for f in view["failures"]}
        assert reasons.keys() == {"empty.txt", "broken.pdf"}, reasons
        assert reasons["empty.txt"].startswith("EmptyDocument:")
        assert reasons["broken.pdf"].startswith("CorruptDocument:")

        # Every file is a document with its own status; the bad ones say why.
        docs = {d["filename"]: d for d in await documents(api)}
        assert len(docs) == 51
        assert (
            docs["empty.txt"]["status"] == "failed"
            and "EmptyDocument" in docs["empty.txt"]["error"]
        )
        assert docs["broken.pdf"]["status"] == "failed"
        good = [d for d in docs.values() if d["status"] == "ready"]
        assert len(good) == 49 and all(d["tags"] == ["folder"] for d in good)
        # The bigger file went through its own import, a child task.
        assert docs["big.txt"]["last_task_id"].endswith(f"import-{docs['big.txt']['document_id']}")
        one = docs["week-1/note-005.md"]
        assert one["indexed_chunks"] == 1 and one["last_task_id"] == body["task_id"]
        detail = (await api.http.get(f"/v1/documents/{one['document_id']}")).json()
        assert detail["points_in_index"] == 1 and detail["task"]["status"] == "completed"

        # Searchable, each hit its own document.
        hits = (await api.http.get("/v1/search", params={"q": "zebrafish5", "k": 3})).json()
        assert hits[0]["document_id"] == one["document_id"], hits
        chunks = (await api.http.get(f"/v1/documents/{one['document_id']}/chunks")).json()
        assert chunks["total"] == 1 and "zebrafish5 " in chunks["chunks"][0]["text"]

        # Each text was paid for once.
        paid = fake_openai.embedded_count()
        assert fake_openai.duplicates() == 0 and paid >= GOOD

        # The same folder again: nothing duplicated, nothing embedded again.
        again = await submit(api, root, paths)
        assert again["task_id"] == body["task_id"]  # the same files: the same batch
        assert (await api.wait_task(again["task_id"]))["status"] == "completed"
        assert len(await documents(api)) == 51
        # One point per note, whatever the number of imports: the old version's went.
        params: dict[str, Any] = {"q": "rereading", "k": 100, "mode": "keyword"}
        hits = (await api.http.get("/v1/search", params=params)).json()
        assert len(hits) == GOOD and len({h["document_id"] for h in hits}) == GOOD
        assert fake_openai.embedded_count() == paid

        # A document of the batch is deleted alone, and imported again alone.
        r = await api.http.delete(f"/v1/documents/{one['document_id']}")
        assert r.status_code == 202, r.text
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        hits = (await api.http.get("/v1/search", params={"q": "zebrafish5", "k": 3})).json()
        assert all(h["document_id"] != one["document_id"] for h in hits)
        assert (await api.http.get(f"/v1/documents/{one['document_id']}")).status_code == 404
        alone = await api.upload(root / "week-1" / "note-005.md")
        assert alone["document_id"] == one["document_id"]
        assert (await api.wait_task(alone["task_id"]))["status"] == "completed"
        detail = (await api.http.get(f"/v1/documents/{one['document_id']}")).json()
        assert detail["points_in_index"] == 1 and detail["status"] == "ready"


async def test_a_cancelled_batch_leaves_no_document_half_imported(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    cfg = openai_settings(settings, fake_openai, embedding_batch_size=4)
    fake_openai.latency = 0.3
    async with running_env(cfg) as env:
        batches = DocumentBatchService(env.documents)
        accepted = await batches.submit(
            [(f"n{i}.txt", [note(i).encode()]) for i in range(200)],
            size=200 * 100,
            metadata=DocumentMetadata(owner="ann"),
            group_size=20,
            groups_at_once=1,
        )
        await eventually(
            lambda: batches.view(accepted.task_id),
            lambda v: v.imported >= 20,
            timeout=60,
            what="a first group imported",
        )
        await env.service.cancel(accepted.task_id, reason="test", actor="test")
        final = await env.service.wait(accepted.task_id, timeout=60)
        assert final.status == "cancelled"
        page = await env.documents.list(limit=500)
        statuses = {d.status for d in page.items}
        # Imported groups stay imported; the group cut short is settled; later ones never began.
        assert statuses <= {"ready", "cancelled"}, statuses
        ready = [d for d in page.items if d.status == "ready"]
        assert 20 <= len(ready) < 200 and page.total < 200
        assert await env.points() == len(ready)
        assert await env.points(staged=True) == len(ready)


async def test_progress_while_running_counts_what_is_done(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    cfg = openai_settings(settings, fake_openai)
    fake_openai.latency = 0.2
    async with running_env(cfg) as env:
        batches = DocumentBatchService(env.documents)
        accepted = await batches.submit(
            [(f"n{i}.txt", [note(i).encode()]) for i in range(60)],
            size=6000,
            group_size=10,
            groups_at_once=1,
        )
        seen = await eventually(
            lambda: batches.view(accepted.task_id),
            lambda v: 0 < v.done < 60,
            timeout=60,
            what="a batch midway",
        )
        assert seen.status == "running" and seen.total == 60 and seen.done % 10 == 0
        status = await env.service.get_status(accepted.task_id)
        assert status.progress.unit == "documents" and status.progress.total == 60
        done = await env.service.wait(accepted.task_id, timeout=60)
        assert done.status == "completed" and done.result is not None
        assert done.result["imported"] == 60
        await asyncio.sleep(0)


async def test_a_document_deleted_mid_batch_goes_alone(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    cfg = openai_settings(settings, fake_openai, embedding_batch_size=5)
    fake_openai.latency = 0.2
    async with running_env(cfg) as env:
        batches = DocumentBatchService(env.documents)
        accepted = await batches.submit(
            [(f"n{i}.txt", [note(i).encode()]) for i in range(80)],
            size=8000,
            group_size=20,
            groups_at_once=1,
        )
        await eventually(
            lambda: batches.view(accepted.task_id),
            lambda v: v.imported >= 20,
            timeout=60,
            what="a first group imported",
        )
        first = await env.documents.list(limit=500)
        victim = next(d for d in first.items if d.status == "ready")
        assert victim.last_task_id == accepted.task_id
        deleted = await env.documents.delete(victim.document_id, actor="test")
        gone = await env.service.wait(deleted.task_id, timeout=60)
        assert gone.status == "completed" and gone.result is not None
        assert gone.result["import_cancelled"] is False
        # The batch went on with its other documents.
        done = await env.service.wait(accepted.task_id, timeout=90)
        assert done.status == "completed" and done.result is not None
        assert done.result["imported"] == 80
        page = await env.documents.list(limit=500)
        assert victim.document_id not in {d.document_id for d in page.items}
        assert page.total == 79 and {d.status for d in page.items} == {"ready"}
        assert await env.points() == 79
