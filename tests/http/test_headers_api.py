"""The standard headers clients and gateways use, through real HTTP with the real Temporal dev
server: `Location` on every 202 (the task), the `Idempotency-Key` request header."""

from __future__ import annotations

from pathlib import Path

import httpx

from knowledgeops.config.settings import Settings
from tests.helpers.documents import upload
from tests.helpers.environment import EXAMPLES, running_api
from tests.helpers.problems import problem

CLEANUP = {"type": "CLEANUP_EXECUTE", "payload": {}}  # a dry run: removes nothing


async def test_every_202_has_a_location_that_gets_the_task(settings: Settings) -> None:
    # No worker: every task stays pending, so each one can still be cancelled.
    async with running_api(settings, workers=False) as api:
        http = api.http

        async def followed(r: httpx.Response) -> str:
            assert r.status_code == 202, r.text
            task = str(r.json()["task_id"])
            assert r.headers["location"] == f"/v1/tasks/{task}"
            status = await http.get(r.headers["location"])
            assert status.status_code == 200 and status.json()["task_id"] == task, status.text
            return task

        r = await http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
        await followed(r)
        assert r.json()["status_url"] == r.headers["location"]
        cleanup = await followed(await http.post("/v1/tasks", json=CLEANUP))
        await followed(await http.post(f"/v1/tasks/{cleanup}/cancel", json={}))
        await followed(await http.delete(f"/v1/documents/{r.json()['document_id']}"))
        # The admin API's 202s too (its retry: tests/http/test_tasks_api.py).
        reindex = await followed(
            await http.post("/v1/admin/reindex", json={"reason": "test"}, headers=api.admin)
        )
        r = await http.post(
            f"/v1/admin/tasks/{reindex}/cancel", json={"reason": "test"}, headers=api.admin
        )
        assert await followed(r) == reindex


async def test_idempotency_key_header_acts_as_the_body_key(
    settings: Settings, tmp_path: Path
) -> None:
    async with running_api(settings) as api:
        http = api.http

        async def task_of(r: httpx.Response) -> str:
            assert r.status_code == 202, r.text
            return str(r.json()["task_id"])

        def key(value: str) -> dict[str, dict[str, str]]:
            return {"headers": {"Idempotency-Key": value}}

        # POST /v1/tasks: the header and the body field name the same task.
        by_header = await task_of(await http.post("/v1/tasks", json=CLEANUP, **key("nightly-1")))
        keyed = {**CLEANUP, "idempotency_key": "nightly-1"}
        assert await task_of(await http.post("/v1/tasks", json=keyed)) == by_header
        assert await task_of(await http.post("/v1/tasks", json=keyed, **key("nightly-1"))) == (
            by_header
        )
        other = await task_of(await http.post("/v1/tasks", json=CLEANUP, **key("nightly-2")))
        assert other != by_header
        # Both, differing: refused, naming both.
        r = await http.post("/v1/tasks", json={**CLEANUP, "idempotency_key": "a"}, **key("b"))
        detail = problem(r, 422, "idempotency_key_conflict")["detail"]
        assert "Idempotency-Key" in detail and "idempotency_key" in detail
        # The header's limit is the body field's.
        r = await http.post("/v1/tasks", json=CLEANUP, **key("k" * 201))
        problem(r, 422, "invalid_request")

        # An upload: keyed by the header, then by the form field, is one run of its import.
        doc = EXAMPLES / "spaced-repetition.txt"
        first = await task_of(await http.post("/v1/documents", **upload(doc), **key("upload-7")))
        await api.wait_task(first)
        again = await http.post("/v1/documents", **upload(doc, idempotency_key="upload-7"))
        assert await task_of(again) == first
        detail_of = await http.get(f"/v1/admin/tasks/{first}", headers=api.admin)
        assert len(detail_of.json()["runs"]) == 1, "the same key must not start a second run"
        # Differing keys are refused before anything is stored.
        stored = sorted(api.settings.files_dir.iterdir())
        fresh = tmp_path / "fresh.txt"
        fresh.write_text("Tides follow the moon.\n")
        r = await http.post("/v1/documents", **upload(fresh, idempotency_key="a"), **key("b"))
        problem(r, 422, "idempotency_key_conflict")
        assert sorted(api.settings.files_dir.iterdir()) == stored
