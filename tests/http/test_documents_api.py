"""The documents API through real HTTP, with the real worker and Temporal dev server: upload,
search and catalogue, the error statuses of an upload or task, idempotency, delete."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from knowledgeops.config.settings import Settings
from tests.helpers.documents import numbered_paragraphs, upload
from tests.helpers.environment import EXAMPLES, openai_settings, running_api
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.problems import problem


async def test_upload_follow_search_and_catalogue(settings: Settings) -> None:
    async with running_api(settings) as api:
        r = await api.http.post("/v1/documents", **upload(EXAMPLES / "photosynthesis.html"))
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "pending" and body["status_url"] == f"/v1/tasks/{body['task_id']}"
        done = await api.wait_task(body["task_id"])
        assert done["status"] == "completed", done
        chunks = done["result"]["total_chunks"]

        hits = (await api.http.get("/v1/search", params={"q": "What does RuBisCO fix?"})).json()
        assert hits[0]["document_id"] == body["document_id"] and "RuBisCO" in hits[0]["text"]

        docs = (await api.http.get("/v1/documents")).json()
        assert docs["total"] == 1
        assert docs["items"][0]["status"] == "ready"
        assert docs["items"][0]["indexed_chunks"] == chunks
        doc = (await api.http.get(f"/v1/documents/{body['document_id']}")).json()
        assert doc["points_in_index"] == chunks and doc["task"]["status"] == "completed"
        assert doc["title"] == "Photosynthesis"


def _named_evil(root: Path, *, deep: bool = True) -> list[Path]:
    return list(root.rglob("evil*") if deep else root.glob("evil*"))


async def test_error_statuses_are_problems(settings: Settings, tmp_path: Path) -> None:
    small = settings.model_copy(update={"upload_max_bytes": 4096})
    async with running_api(small) as api:
        http = api.http

        def expect(r: httpx.Response, status: int, code: str) -> None:
            problem(r, status, code)

        big = tmp_path / "big.txt"
        big.write_text("x" * 200_000)
        expect(await http.post("/v1/documents", **upload(big)), 413, "file_too_large")
        empty = tmp_path / "empty.txt"
        empty.write_bytes(b"")
        expect(await http.post("/v1/documents", **upload(empty)), 400, "empty_file")
        archive = tmp_path / "p.7z"
        archive.write_bytes(b"7z\xbc\xaf\x27\x1c" + bytes(64))
        # Content decides, not the name.
        r = await http.post("/v1/documents", **upload(archive, name="notes.txt"))
        expect(r, 415, "unsupported_media_type")
        assert not list(small.files_dir.glob("*")), "rejected uploads are not kept"
        expect(await http.get("/v1/tasks/nope"), 404, "not_found")
        expect(await http.post("/v1/tasks/nope/cancel"), 404, "not_found")
        expect(
            await http.post("/v1/tasks", json={"type": "NOPE", "payload": {}}),
            400,
            "unknown_task_type",
        )
        r = await http.post(
            "/v1/tasks", json={"type": "DOCUMENT_IMPORT", "payload": {"file_id": "x"}}
        )
        expect(r, 422, "invalid_payload")
        assert "document_id" in r.json()["detail"]
        r = await http.post(
            "/v1/tasks",
            json={
                "type": "DOCUMENT_IMPORT",
                "payload": {
                    "file_id": "a" * 64,
                    "document_id": "d",
                    "filename": "f" * 400,
                    "metadata": {"tags": ["t" * 2000] * 40},
                },
            },
        )
        expect(r, 413, "payload_too_large")
        expect(await http.get("/v1/search", params={"q": ""}), 422, "invalid_request")

        hostile = tmp_path / "ok.txt"
        hostile.write_text("A perfectly normal note about tides.\n")
        r = await http.post("/v1/documents", **upload(hostile, name="../../../../tmp/evil.txt"))
        assert r.status_code == 202, r.text
        # Stored under its content hash; the client's name never became a path.
        digest = hashlib.sha256(hostile.read_bytes()).hexdigest()
        assert [p.name for p in small.files_dir.iterdir()] == [f"{digest}.txt"]
        assert not _named_evil(tmp_path) and not _named_evil(Path("/tmp"), deep=False)
        done = await api.wait_task(r.json()["task_id"])
        assert done["status"] == "completed"
        expect(await http.post(f"/v1/tasks/{done['task_id']}/cancel"), 409, "already_finished")


async def test_idempotent_enqueue(settings: Settings) -> None:
    async with running_api(settings) as api:
        form = {"idempotency_key": "upload-42"}
        first = (
            await api.http.post(
                "/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt", **form)
            )
        ).json()
        await api.wait_task(first["task_id"])
        again = await api.http.post(
            "/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt", **form)
        )
        assert again.status_code == 202 and again.json()["task_id"] == first["task_id"]
        detail = (
            await api.http.get(f"/v1/admin/tasks/{first['task_id']}", headers=api.admin)
        ).json()
        assert len(detail["runs"]) == 1, "the same key must not start a second run"
        # Without the key, a re-import is a new run of the same task.
        await api.http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
        await api.wait_task(first["task_id"])
        detail = (
            await api.http.get(f"/v1/admin/tasks/{first['task_id']}", headers=api.admin)
        ).json()
        assert len(detail["runs"]) == 2


async def test_bulk_retry_and_delete_document(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.api_key = "other"
    async with running_api(openai_settings(settings, fake_openai, openai_api_key="mine")) as api:
        tasks = []
        for i in range(3):
            p = tmp_path / f"d{i}.txt"
            p.write_text(numbered_paragraphs(5 + i))
            tasks.append((await api.http.post("/v1/documents", **upload(p))).json())
        for j in tasks:
            assert (await api.wait_task(j["task_id"]))["status"] == "failed"
        fake_openai.api_key = "mine"
        r = await api.http.post(
            "/v1/admin/tasks/bulk",
            json={"action": "retry", "filter": {"status": "failed"}, "reason": "provider back"},
            headers=api.admin,
        )
        assert r.status_code == 200, r.text
        assert sorted(r.json()["done"]) == sorted(j["task_id"] for j in tasks)
        for j in tasks:
            assert (await api.wait_task(j["task_id"]))["status"] == "completed"
        victim = tasks[0]["document_id"]
        query = {"q": "Paragraph 1", "document_id": victim}
        assert (await api.http.get("/v1/search", params=query)).json()
        r = await api.http.delete(f"/v1/documents/{victim}", params={"reason": "user asked"})
        assert r.status_code == 202, r.text
        # Out of search before its task has run a step.
        assert not (await api.http.get("/v1/search", params=query)).json()
        done = await api.wait_task(r.json()["task_id"])
        assert done["status"] == "completed" and done["result"]["points_removed"] > 0
        assert (await api.http.get(f"/v1/documents/{victim}")).status_code == 404
        audit = (await api.http.get("/v1/admin/audit", headers=api.admin)).json()
        actions = [a["action"] for a in audit]
        assert "bulk_retry" in actions and "document_delete" in actions


async def test_delete_of_a_queued_document(settings: Settings) -> None:
    """A delete is a task: asked for while no worker runs, it is accepted (202) and waits in
    its queue like any task; asking again joins it. A worker then stops the queued import and
    removes the document, its stored file included."""
    async with running_api(settings, workers=False) as api:
        body = (
            await api.http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
        ).json()
        doc_id, task = body["document_id"], body["task_id"]
        first = await api.http.delete(f"/v1/documents/{doc_id}", params={"reason": "gone"})
        again = await api.http.delete(f"/v1/documents/{doc_id}")
        assert first.status_code == again.status_code == 202, first.text
        delete_task = first.json()["task_id"]
        assert first.headers["location"] == again.headers["location"] == f"/v1/tasks/{delete_task}"
        assert again.json()["task_id"] == delete_task
        shown = (await api.http.get(f"/v1/documents/{doc_id}")).json()
        assert shown["status"] == "deleting"
        # Its import now would be undone by the delete task: refused until that has ended.
        r = await api.http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
        assert delete_task in problem(r, 409, "document_being_deleted")["detail"]
        assert (await api.http.get(f"/v1/tasks/{delete_task}")).json()["status"] == "pending"
        audit = (await api.http.get("/v1/admin/audit", headers=api.admin)).json()
        assert [(a["action"], a["outcome"]) for a in audit] == [
            ("document_delete", "requested"),
            ("cancel", "requested"),  # asked again: the import's cancel is requested already
            ("document_delete", "requested"),
            ("cancel", "requested"),
        ]
    async with running_api(settings) as api:
        done = await api.wait_task(delete_task)
        assert done["status"] == "completed", done
        assert done["result"] == {
            "document_id": doc_id,
            "import_cancelled": True,
            "points_removed": 0,
            "file_removed": True,
        }
        # The cancel was requested with the delete: the import never began.
        assert (await api.wait_task(task))["status"] == "cancelled"
        page = (await api.http.get("/v1/events", params={"task_id": task})).json()
        assert [e["event_type"] for e in page["events"]] == ["TaskEnqueued", "TaskCancelled"]
        assert (await api.http.get(f"/v1/documents/{doc_id}")).status_code == 404
        assert not list(settings.files_dir.iterdir()), "the stored upload is removed too"
        audit = (await api.http.get("/v1/admin/audit", headers=api.admin)).json()
        assert (audit[0]["action"], audit[0]["outcome"]) == ("document_delete", "deleted")
        assert audit[0]["reason"] == "gone" and delete_task in audit[0]["task_ids"]
