"""The tasks, events and admin APIs through real HTTP, with the real worker and Temporal dev
server: cancel, event feeds and streams, manual and bulk retry, the admin views, Temporal
being unreachable."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from tests.helpers.documents import heavy_markdown, numbered_paragraphs, upload
from tests.helpers.environment import EXAMPLES, openai_settings, running_api
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.problems import problem
from tests.helpers.waiting import eventually


async def test_cancel_through_api_and_events_in_order(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "long.txt"
    doc.write_text(numbered_paragraphs(300))
    # A client timeout long enough that a held request is not given up and sent again.
    cfg = openai_settings(settings, fake_openai, openai_timeout_seconds=120.0)
    async with running_api(cfg) as api:
        # Three embedding requests (batches of 16) are answered, the fourth waits at the fake's
        # gate: the cancel lands in the middle of the embed step, whatever the machine's speed.
        before = fake_openai.requests
        fake_openai.hold = lambda kind, n: kind == "embeddings" and n > before + 3
        body = (await api.http.post("/v1/documents", **upload(doc))).json()
        task = body["task_id"]

        async def state() -> tuple[str, int, int]:
            st = (await api.http.get(f"/v1/tasks/{task}")).json()
            return st["status"], st["progress"]["done"], fake_openai.held

        # A batch's checkpoint moves on once its cache write lands, during the next request.
        await eventually(
            state,
            lambda s: s[0] == "running" and s[1] >= 32 and s[2] == 1,
            timeout=60,
            what="running, 32 chunks done, the next request held",
        )
        r = await api.http.post(f"/v1/tasks/{task}/cancel", json={"reason": "changed my mind"})
        assert r.status_code == 202 and r.headers["location"] == f"/v1/tasks/{task}"
        final = await api.wait_task(task)
        # Cancelled while its request was still held: the cancel did not wait for the model,
        # and nothing was asked after it.
        assert (fake_openai.held, fake_openai.requests - before) == (1, 4)
        fake_openai.release()
        await eventually(lambda: fake_openai.in_flight, lambda n: n == 0, what="the answer")
        assert final["status"] == "cancelled"
        doc_row = (await api.http.get(f"/v1/documents/{body['document_id']}")).json()
        assert doc_row["points_in_index"] == 0 and doc_row["status"] == "cancelled"

        page = (await api.http.get("/v1/events", params={"task_id": task})).json()
        kinds = [e["event_type"] for e in page["events"]]
        assert kinds == ["TaskEnqueued", "TaskStarted", "TaskCancelled"]
        audit = (
            await api.http.get("/v1/admin/audit", params={"task_id": task}, headers=api.admin)
        ).json()
        assert audit[0]["action"] == "cancel" and audit[0]["reason"] == "changed my mind"


async def test_events_feed_and_streams_deliver_each_event_once_in_order(settings: Settings) -> None:
    async with running_api(settings) as api:
        tasks = []
        for name in ("spaced-repetition.txt", "temporal-retries.md"):
            tasks.append(
                (await api.http.post("/v1/documents", **upload(EXAMPLES / name))).json()["task_id"]
            )
        for j in tasks:
            await api.wait_task(j)
        everything = (await api.http.get("/v1/events", params={"after": 0, "limit": 1000})).json()
        events = everything["events"]
        assert len({e["event_id"] for e in events}) == len(events) == 6
        for j in tasks:
            mine = [e["event_type"] for e in events if e["task_id"] == j]
            assert mine == ["TaskEnqueued", "TaskStarted", "TaskCompleted"]
        # Paging one at a time with the cursor yields exactly the same sequence.
        paged, cursor = [], 0
        while True:
            page = (await api.http.get("/v1/events", params={"after": cursor, "limit": 1})).json()
            if not page["events"]:
                break
            paged += page["events"]
            cursor = page["next_cursor"]
        assert [e["event_id"] for e in paged] == [e["event_id"] for e in events]
        # The SSE feed, resumed from the second event via Last-Event-ID.
        streamed = []
        headers = {"Last-Event-ID": str(events[1]["seq"])}
        async with api.http.stream("GET", "/v1/events/stream", headers=headers) as r:
            async for line in r.aiter_lines():
                if line.startswith("id: "):
                    streamed.append(int(line[4:]))
                if len(streamed) == 4:
                    break
        assert streamed == [e["seq"] for e in events[2:6]]
        # A task's live status stream ends with its final status.
        statuses = []
        async with api.http.stream("GET", f"/v1/tasks/{tasks[0]}/events") as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    statuses.append(line)
        assert '"status": "completed"' in statuses[-1]


async def test_manual_retry_links_runs_and_is_audited(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "r.txt"
    doc.write_text(numbered_paragraphs(20))
    fake_openai.api_key = "rotated-key"  # the worker's key is refused: the import fails
    async with running_api(openai_settings(settings, fake_openai, openai_api_key="old-key")) as api:
        task = (await api.http.post("/v1/documents", **upload(doc))).json()["task_id"]
        failed = await api.wait_task(task)
        assert failed["status"] == "failed" and "EmbeddingRejected" in failed["last_error"]
        fake_openai.api_key = "old-key"  # the provider accepts it again
        r = await api.http.post(
            f"/v1/admin/tasks/{task}/retry", json={"reason": "key fixed"}, headers=api.admin
        )
        assert r.status_code == 202, r.text
        assert r.headers["location"] == f"/v1/tasks/{task}"
        new_run = r.json()["run_id"]
        busy = await api.http.post(
            f"/v1/admin/tasks/{task}/retry", json={"reason": "again"}, headers=api.admin
        )
        # The new run is running or already completed: either way not retryable.
        assert busy.status_code == 409, busy.text
        problem(busy, 409, "not_retryable")
        done = await api.wait_task(task)
        assert done["status"] == "completed"
        detail = (await api.http.get(f"/v1/admin/tasks/{task}", headers=api.admin)).json()
        runs = detail["runs"]
        assert runs[0]["run_id"] == new_run and runs[0]["retry_of"] == runs[1]["run_id"]
        assert [a["activity"] for a in detail["activities"]].count("embed_chunks") == 1
        assert detail["input"]["document_id"]
        audit = (
            await api.http.get("/v1/admin/audit", params={"action": "retry"}, headers=api.admin)
        ).json()
        first = audit[-1]
        assert (first["actor"], first["task_ids"], first["reason"]) == (
            "alice",
            [task],
            "key fixed",
        )
        assert first["outcome"] == "started"
        events = (await api.http.get("/v1/events", params={"task_id": task})).json()["events"]
        kinds = [e["event_type"] for e in events]
        assert kinds[:3] == ["TaskEnqueued", "TaskStarted", "TaskFailed"]
        assert kinds[3:] == ["TaskRetried", "TaskStarted", "TaskCompleted"]
        assert events[3]["data"]["retry_of"] == runs[1]["run_id"]


async def test_overview_shows_backlog_then_worker(settings: Settings) -> None:
    async with running_api(settings, workers=False) as api:
        form = {"title": "Spacing", "tags": "memory, review"}
        body = (
            await api.http.post(
                "/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt", **form)
            )
        ).json()
        task, doc_id = body["task_id"], body["document_id"]
        assert (await api.http.get(f"/v1/tasks/{task}")).json()["status"] == "pending"
        # Listed once its import runs; until then the task describes the document.
        assert (await api.http.get("/v1/documents")).json()["total"] == 0
        queued = (await api.http.get(f"/v1/documents/{doc_id}")).json()
        assert queued["status"] == "queued" and queued["task"]["status"] == "pending"
        assert queued["title"] == "Spacing" and queued["tags"] == ["memory", "review"]
        assert queued["filename"] == "spaced-repetition.txt"
        queue = f"{settings.prefix}knowledgeops-ingest"

        async def overview() -> dict[str, Any]:
            return dict((await api.http.get("/v1/admin/overview", headers=api.admin)).json())

        def ingest_of(ov: dict[str, Any]) -> dict[str, Any]:
            return dict(next(q for q in ov["queues"] if q["task_queue"] == queue))

        ov = await eventually(
            overview, lambda ov: ingest_of(ov)["backlog_count"] >= 1, what="a backlog"
        )
        assert ingest_of(ov)["workers"] == []
        assert ov["task_types"]["DOCUMENT_IMPORT"] == {"running": 1}

        async def pending() -> list[tuple[str, str]]:
            r = await api.http.get(
                "/v1/admin/tasks", params={"status": "pending"}, headers=api.admin
            )
            return [(t["task_id"], t["status"]) for t in r.json()["items"]]

        # Visibility is eventually consistent: wait for the condition.
        assert await eventually(pending, bool, what="a pending task") == [(task, "pending")]
        running = await api.http.get(
            "/v1/admin/tasks", params={"status": "running"}, headers=api.admin
        )
        assert running.json()["items"] == [], "a task no worker began is not running"
    async with running_api(settings) as api:
        assert (await api.wait_task(task))["status"] == "completed"
        [listed_doc] = (await api.http.get("/v1/documents")).json()["items"]
        assert listed_doc["document_id"] == doc_id and listed_doc["status"] == "ready"
        assert listed_doc["title"] == "Spacing" and listed_doc["tags"] == ["memory", "review"]
        ov = (await api.http.get("/v1/admin/overview", headers=api.admin)).json()
        ingest = next(q for q in ov["queues"] if q["task_queue"] == queue)
        assert ingest["workers"], "the running worker must be listed"
        assert ov["task_types"]["DOCUMENT_IMPORT"] == {"completed": 1}
        # The worker polls every queue the product declares (written out, docs/deployment.md),
        # once each: for workflows and activities, but only activities on the parse queue.
        both = ("workflow", "activity")
        declared = {
            "knowledgeops-ingest": both,
            "knowledgeops-ai": both,
            "knowledgeops-agents": both,
            "knowledgeops-maintenance": both,
            "knowledgeops-parse": ("activity",),
        }
        expected = sorted(
            (settings.prefix + name, kind) for name, kinds in declared.items() for kind in kinds
        )

        async def polled() -> list[tuple[str, str]]:
            workers = (await api.http.get("/v1/admin/workers", headers=api.admin)).json()
            return sorted((w["task_queue"], w["kind"]) for w in workers)

        def as_declared(seen: list[tuple[str, str]]) -> bool:
            return seen == expected

        await eventually(polled, as_declared, what="one poller per declared queue")


async def test_admin_endpoints_refuse_without_a_valid_token(settings: Settings) -> None:
    async with running_api(settings) as api:
        for method, path in [
            ("GET", "/v1/admin/overview"),
            ("GET", "/v1/admin/tasks"),
            ("GET", "/v1/admin/tasks/x"),
            ("POST", "/v1/admin/tasks/x/retry"),
            ("POST", "/v1/admin/tasks/x/cancel"),
            ("POST", "/v1/admin/tasks/bulk"),
            ("GET", "/v1/admin/workers"),
            ("GET", "/v1/admin/audit"),
        ]:
            none = await api.http.request(method, path, json={"reason": "x"})
            problem(none, 401, "unauthenticated")
            assert none.headers["www-authenticate"] == "Bearer"
            wrong = await api.http.request(
                method, path, json={"reason": "x"}, headers={"Authorization": "Bearer nope"}
            )
            problem(wrong, 403, "forbidden")
            assert "tasks" not in wrong.text
    # No ADMIN_TOKENS at all: the admin API is off, whatever token is sent.
    async with running_api(settings, admin_tokens="") as api:
        r = await api.http.get("/v1/admin/overview", headers=api.admin)
        problem(r, 403, "admin_disabled")


async def test_pending_filter_selects_only_tasks_no_worker_began(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # One parser, and no small documents (their steps run as local activities, no queue): while
    # a long document parses, the next import waits for
    # the parser in the parse queue (pending: no activity of it has started).
    cfg = settings.model_copy(update={"parser_concurrency": 1, "small_document_bytes": 0})
    long_doc, short_doc = heavy_markdown(tmp_path / "long.md", 40), tmp_path / "short.txt"
    short_doc.write_text(numbered_paragraphs(3))
    async with running_api(cfg) as api:
        running = (await api.http.post("/v1/documents", **upload(long_doc))).json()["task_id"]

        async def status() -> str:
            return str((await api.http.get(f"/v1/tasks/{running}")).json()["status"])

        await eventually(status, lambda s: s == "running", what=f"{running} running")
        queued = (await api.http.post("/v1/documents", **upload(short_doc))).json()["task_id"]
        assert (await api.http.get(f"/v1/tasks/{queued}")).json()["status"] == "pending"

        async def listed(status: str, want: list[str]) -> list[str]:
            # Visibility is eventually consistent: wait for the condition, don't assume it.
            async def ids() -> list[str]:
                r = await api.http.get(
                    "/v1/admin/tasks", params={"status": status}, headers=api.admin
                )
                return [t["task_id"] for t in r.json()["items"]]

            return await eventually(ids, lambda found: found == want, what=f"{status} {want}")

        assert await listed("pending", [queued]) == [queued]
        assert await listed("running", [running]) == [running]
        body = {"action": "cancel", "filter": {"status": "pending"}, "reason": "drain queue"}
        r = await api.http.post("/v1/admin/tasks/bulk", json=body, headers=api.admin)
        assert r.status_code == 200 and r.json()["done"] == [queued], r.text
        assert (await api.wait_task(queued))["status"] == "cancelled"
        assert (await api.http.get(f"/v1/tasks/{running}")).json()["status"] == "running"
        await api.http.post(f"/v1/tasks/{running}/cancel")
        assert (await api.wait_task(running))["status"] == "cancelled"


async def test_temporal_unreachable_is_a_fast_503_and_search_still_answers(
    settings: Settings, tmp_path: Path
) -> None:
    from starter.dev_server import TemporalDevServer, free_port

    # A Temporal server of this test's own, to stop it under a running API.
    server = TemporalDevServer(
        host="127.0.0.1",
        port=free_port(),
        db_file=None,
        log_file=tmp_path / "temporal.log",
        headless=True,
    )
    server.start()
    try:
        await server.wait_ready()
        own = settings.model_copy(update={"temporal_address": server.address})
        async with running_api(own) as api:
            r = await api.http.post("/v1/documents", **upload(EXAMPLES / "photosynthesis.html"))
            task = r.json()["task_id"]
            assert (await api.wait_task(task))["status"] == "completed"
            server.stop()
            requests: list[tuple[str, str, dict[str, Any]]] = [
                ("GET", f"/v1/tasks/{task}", {}),
                ("POST", "/v1/tasks", {"json": {"type": "CLEANUP_EXECUTE", "payload": {}}}),
                ("POST", "/v1/documents", upload(EXAMPLES / "spaced-repetition.txt")),
            ]
            for method, path, kw in requests:
                started = asyncio.get_running_loop().time()
                r = await api.http.request(method, path, **kw)
                took = asyncio.get_running_loop().time() - started
                problem(r, 503, "temporal_unavailable")
                assert "Temporal is unreachable" in r.text and r.headers["retry-after"]
                assert took < 2.5, f"{path} took {took:.1f} s"
            # What does not need Temporal keeps answering.
            hits = await api.http.get("/v1/search", params={"q": "What does RuBisCO fix?"})
            assert hits.status_code == 200 and "RuBisCO" in hits.json()[0]["text"]
            assert (await api.http.get("/v1/documents")).json()["total"] == 1
    finally:
        server.stop()
