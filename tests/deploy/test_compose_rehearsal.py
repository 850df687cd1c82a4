"""docker-compose.yml rehearsed on a machine with no Docker engine. The stack is read as
`docker-compose config` resolves it; every service has a role here (SERVICE_ROLES: a new one
fails the test until it is given one) and starts in the order its depends_on allows. What
cannot run here is stood in for: PostgreSQL by a cluster of the test's own, Temporal (schema,
server, Web UI) by the dev server, MinIO by `rclone serve s3`, the Qdrant server by the
embedded index, so the API and the workers of the pools that open the index run as ONE
process. The rest runs as compose says (app-db's psql, temporal-setup's script, migrate, the
parse worker), each application process on a data folder of its own. Then, through the HTTP
API: every example imported and found; an import the model refused, retried by an operator;
the parse worker SIGKILLed mid-parse and restarted, the import complete with every chunk
embedded once; a backup into the backups bucket; each webhook event once, in order; a
`docker stop` drain; and the backup restored onto fresh hosts, answering search the same.
PostgreSQL pass only (KNOWLEDGEOPS_TEST_POSTGRES_URL): it starts PostgreSQL clusters of its own."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from secrets import token_hex
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from knowledgeops.registry.task_types import SEARCH_ATTRIBUTES
from tests.helpers.compose_rehearsal import check_roles, compose_config, duration, table
from tests.helpers.compose_site import Site
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import EXAMPLES, PG_URL, Api, HermeticSettings, openai_settings
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.postgres import postgres_bin
from tests.helpers.temporal import ActivityStart, activity_starts
from tests.helpers.waiting import eventually
from tests.helpers.webhook_receiver import SECRET, Receiver

pytestmark = [
    pytest.mark.skipif(not PG_URL, reason="the PostgreSQL pass (KNOWLEDGEOPS_TEST_POSTGRES_URL)"),
    pytest.mark.skipif(postgres_bin() is None, reason="no PostgreSQL server installed"),
    pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose"),
]
API_TOKEN = f"rehearsal-api-{token_hex(8)}"
ADMIN_TOKEN = f"rehearsal-admin-{token_hex(8)}"
# A keyword query -> the example that answers it (tests/ingest/test_parsing.py's needles).
QUERIES = {
    "Ebbinghaus forgetting curve": "spaced-repetition.txt",
    "heartbeat timeout": "temporal-retries.md",
    "RuBisCO": "photosynthesis.html",
    "aquifers": "water-cycle.pdf",
    "nucleophilic substitution": "chemistry-plan.docx",
    "重复的数据": "向量检索.md",
}
MODES = ("hybrid", "dense", "keyword")
EMBEDDER = (
    "EMBEDDING_PROVIDER",
    "EMBEDDING_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_TIMEOUT_SECONDS",
    "EMBEDDING_BATCH_SIZE",
)


def deployment_values() -> dict[str, str]:
    """What an operator fills into .env (deploy/compose.env.example): test values."""
    values = {k: token_hex(12) for k in ("POSTGRES_PASSWORD", "APP_DB_PASSWORD", "QDRANT_API_KEY")}
    return values | {
        "S3_SECRET_KEY": token_hex(16),
        "API_TOKENS": f"{API_TOKEN}:rehearsal",
        "ADMIN_TOKENS": f"{ADMIN_TOKEN}:operator",
    }


def additions(fake: FakeOpenAI, receiver: Receiver) -> dict[str, str]:
    """Settings the rehearsal adds to every application service (compose sets none of them):
    the local OpenAI-compatible test server as the embedder, and the webhook receiver."""
    embedder = openai_settings(HermeticSettings(), fake).to_env()
    return {k: embedder[k] for k in EMBEDDER} | {
        "WEBHOOK_URLS": receiver.url,
        "WEBHOOK_SECRET": SECRET,
    }


@asynccontextmanager
async def api_of(site: Site) -> AsyncIterator[Api]:
    """The site's HTTP API with the public token (admin calls pass `api.admin`)."""
    settings = HermeticSettings.model_validate(site.env("api"))  # compose's are valid settings
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with httpx.AsyncClient(base_url=site.api_url, timeout=60, headers=headers) as http:
        yield Api(http, settings, {"Authorization": f"Bearer {ADMIN_TOKEN}"})


async def search(api: Api, q: str, mode: str, k: int = 5) -> list[tuple[str, int]]:
    r = await api.http.get("/v1/search", params={"q": q, "mode": mode, "k": k})
    assert r.status_code == 200, r.text
    return [(hit["document_id"], hit["chunk_index"]) for hit in r.json()]


async def all_events(api: Api) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while True:
        params = {"after": found[-1]["seq"] if found else 0, "limit": 500}
        events = (await api.http.get("/v1/events", params=params)).json()["events"]
        if not events:
            return found
        found += events


def delivered(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(body) for _, body in receiver.accepted]


class Laps:
    """How long each step took, for the log."""

    def __init__(self) -> None:
        self.took: list[str] = []
        self._since = time.monotonic()

    def __call__(self, step: str) -> None:
        now = time.monotonic()
        self.took.append(f"{step} {now - self._since:.0f} s")
        self._since = now


async def test_the_compose_stack_rehearsed(
    tmp_path: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    services = compose_config(tmp_path / "compose", deployment_values())
    check_roles(services)
    receiver = Receiver(secret=SECRET)
    site = Site("first", tmp_path / "first", services, additions(fake_openai, receiver))
    fresh = Site("restored", tmp_path / "restored", services, site.extra_env)
    lap = Laps()
    try:
        await site.up(before_apps=lambda: attributes_registered(site))
        await check_the_start(site)
        lap("up")
        async with api_of(site) as api:
            ids = await import_every_example(api)
            lap("examples")
            await retry_a_refused_import(api, fake_openai, tmp_path)
            lap("retry")
            kills = await kill_the_parse_pool_mid_parse(site, api, fake_openai, tmp_path)
            lap(f"parse pool killed ({kills}x)")
            archive = await back_up(site, api)
            await every_event_once_in_order(api, receiver)
            queries = [*QUERIES, "how does a retried activity resume?"]
            before = {(q, m): await search(api, q, m) for q in queries for m in MODES}
            documents = (await api.http.get("/v1/documents")).json()["items"]
        assert {ids[name] for name in QUERIES.values()} <= {d["document_id"] for d in documents}
        lap("backup, webhooks")
        await stop_like_docker(site)
        lap("docker stop")
        await restore_onto_fresh_hosts(site, fresh, archive, fake_openai, lap)
        lap("restored site's workers up")
        async with api_of(fresh) as api:
            after = {(q, m): await search(api, q, m) for q in queries for m in MODES}
            assert after == before, "the restored site answers search differently"
            again = (await api.http.get("/v1/documents")).json()["items"]
            assert [d["document_id"] for d in again] == [d["document_id"] for d in documents]
            await webhooks_after_the_restore(api, receiver, tmp_path)
        lap("restored site checked")
    finally:
        try:
            site.close()
        finally:
            fresh.close()
            receiver.server.shutdown()
            with capsys.disabled():
                print("\n\ndocker-compose.yml rehearsed (tests/deploy/test_compose_rehearsal.py):")
                print(table(site.rehearsed()))
                print(f"steps: {', '.join(lap.took)}\n")


async def check_the_start(site: Site) -> None:
    """migrate ran first and alone: every application process started after it exited 0, and
    the schema is at head."""
    apps = [name for event, name in site.events if event == "start" and name in site.running]
    migrated = site.events.index(("exit", "migrate"))
    assert all(site.events.index(("start", name)) > migrated for name in apps), site.events
    code, out = await site.cli("migrate", "db", "current")
    assert code == 0 and "head" in out, out


async def attributes_registered(site: Site) -> None:
    """Once the one-shot jobs are done, before any worker (which registers them too): the
    search attributes are there, so temporal-setup's script registered them (the stand-in
    server has none of its own)."""
    assert site.temporal is not None
    client = await Client.connect(site.temporal.address)
    namespace = site.services["temporal-setup"]["environment"]["TEMPORAL_NAMESPACE"]
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    assert {key.name for key in SEARCH_ATTRIBUTES} <= set(listed.custom_attributes), listed


async def import_every_example(api: Api) -> dict[str, str]:
    """Every file in examples/ uploaded, each import completed, each found by a keyword
    query known to be in it; file name -> document id."""
    answers = {path.name: await api.upload(path) for path in sorted(EXAMPLES.iterdir())}
    for name, answer in answers.items():
        done = await api.wait_task(answer["task_id"], timeout=120)
        assert done["status"] == "completed", (name, done)
    ids = {name: str(answer["document_id"]) for name, answer in answers.items()}
    for query, name in QUERIES.items():
        hits = await search(api, query, "keyword", k=3)
        assert hits and hits[0][0] == ids[name], (query, hits)
    return ids


async def retry_a_refused_import(api: Api, fake: FakeOpenAI, tmp_path: Path) -> None:
    """The model provider refuses the key: the import fails at once; once it accepts it
    again, an operator's retry through the admin API completes it, audited."""
    key, fake.api_key = fake.api_key, "rotated-at-the-provider"
    doc = tmp_path / "refused.md"
    doc.write_text("# Refused once\n\n" + numbered_paragraphs(12))
    task = (await api.upload(doc))["task_id"]
    failed = await api.wait_task(task)
    assert failed["status"] == "failed" and "EmbeddingRejected" in failed["last_error"], failed
    fake.api_key = key
    reason = "the provider accepts the key again"
    r = await api.http.post(
        f"/v1/admin/tasks/{task}/retry", json={"reason": reason}, headers=api.admin
    )
    assert r.status_code == 202, r.text
    assert (await api.wait_task(task))["status"] == "completed"
    r = await api.http.get("/v1/admin/audit", params={"task_id": task}, headers=api.admin)
    audit = [a for a in r.json() if a["action"] == "retry"]
    assert [(a["actor"], a["reason"], a["outcome"]) for a in audit] == [
        ("operator", reason, "started")
    ], r.json()


async def kill_the_parse_pool_mid_parse(
    site: Site, api: Api, fake: FakeOpenAI, tmp_path: Path
) -> int:
    """`docker kill` of worker-parse while it parses a large document, then its command again
    (restart: unless-stopped): the import completes, points == chunks, each chunk embedded
    exactly once, and the step the killed worker ran was finished by the restarted one. How
    many kills it took (one but when a kill falls between two steps)."""
    assert site.temporal is not None
    client = await Client.connect(site.temporal.address)
    big = tmp_path / "big.txt"
    big.write_text(numbered_paragraphs(6000, words=60))  # ~2.6 MB: a parse of seconds
    embedded = fake.embedded_count()
    answer = await api.upload(big)
    task = answer["task_id"]

    async def parsing() -> tuple[str, str] | None:
        """The parse-queue step running now, and the worker running it."""
        desc = await client.get_workflow_handle(task).describe()
        for p in desc.raw_description.pending_activities:
            running = p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            if running and p.activity_type.name in ("parse_document", "chunk_document"):
                return str(p.activity_type.name), p.last_worker_identity
        return None

    def started(found: tuple[str, str] | None) -> bool:
        return found is not None

    kills = 0
    while True:
        kills += 1
        assert kills <= 3, "three kills of worker-parse all fell between parse steps"
        found = await eventually(parsing, started, timeout=90, what="a parse-queue step")
        assert found is not None
        parse = site.running["worker-parse"]
        killed = {p.pid for p in parse.processes()}
        await asyncio.to_thread(parse.kill)
        # Mid-step: Temporal still has a step started by the dead worker. Not so when the kill
        # fell between two steps (a busy machine): then again, on the next step.
        now = await parsing()
        await site.restart("worker-parse")
        if now is not None and now[1] == found[1]:
            break
    step = ActivityStart(now[0], 1, now[1])
    restarted = {p.pid for p in site.running["worker-parse"].processes()}
    done = await api.wait_task(task, timeout=180)
    assert done["status"] == "completed", done
    # The history keeps the attempt that ended a step: a later one, on the restarted worker.
    ended = [s for s in await activity_starts(client, task) if s.activity == step.activity][-1]
    assert step.pid in killed and ended.pid in restarted and ended.attempt > 1, (step, ended)
    chunks = done["result"]["total_chunks"]
    detail = (await api.http.get(f"/v1/documents/{answer['document_id']}")).json()
    assert detail["indexed_chunks"] == detail["points_in_index"] == chunks > 0, detail
    new = fake.inputs[embedded:]
    assert len(new) == len(set(new)) == chunks, "a chunk was embedded twice, or not at all"
    return kills


async def back_up(site: Site, api: Api) -> str:
    """A backup through the API (the maintenance pool, pg_dump), its export in the backups
    bucket: the archive's name."""
    r = await api.http.post("/v1/tasks", json={"type": "BACKUP_EXECUTE", "payload": {}})
    assert r.status_code == 202, r.text
    done = await api.wait_task(r.json()["task_id"], timeout=180)
    assert done["status"] == "completed", done
    result = done["result"]
    assert result["database_kind"] == "postgresql", result
    assert str(result["exported_to"]).startswith("s3://knowledgeops-backups/"), result
    assert site.s3 is not None
    bucket = site.s3.root / "knowledgeops-backups"
    landed = [p.relative_to(bucket).as_posix() for p in bucket.rglob("*") if p.is_file()]
    assert result["exported_to"].removeprefix("s3://knowledgeops-backups/") in landed, landed
    return str(result["archive"])


async def every_event_once_in_order(api: Api, receiver: Receiver) -> None:
    """The receiver got every domain event exactly once, verified, in the events' order."""
    events = await all_events(api)
    ids = [e["event_id"] for e in events]

    def arrived() -> list[str]:
        return [e["event_id"] for e in delivered(receiver)]

    await eventually(arrived, lambda got: got == ids, timeout=60, what="every event delivered")
    assert receiver.refused == [] and set(receiver.attempts.values()) == {1}
    assert len(set(ids)) == len(ids)
    seqs = [e["seq"] for e in delivered(receiver)]
    assert seqs == sorted(set(seqs)), seqs


async def stop_like_docker(site: Site) -> None:
    """`docker compose stop`: SIGTERM to each container's main process; a worker drains and
    exits 0 within the service's stop_grace_period, leaving nothing running."""
    for proc in {id(p): p for p in site.running.values()}.values():
        names = [n for n, p in site.running.items() if p is proc]
        grace = max(duration(site.services[n].get("stop_grace_period", "10s")) for n in names)
        code, left = await asyncio.to_thread(proc.stop, grace)
        assert (code, left) == (0, []), (
            f"{names}: exit {code}, left running {left}\n" + (proc.output()[-3000:])
        )


async def restore_onto_fresh_hosts(
    site: Site, fresh: Site, archive: str, fake: FakeOpenAI, lap: Laps
) -> None:
    """A second site from nothing (its own PostgreSQL, Temporal, store, data folders): the
    one-shot jobs as before, then, before any worker starts, `knowledgeops restore` on the
    index's host, the archive fetched from the backups bucket by its name."""

    async def restore() -> None:
        lap("restored site's stand-ins and jobs")
        await attributes_registered(fresh)
        assert site.s3 is not None and fresh.s3 is not None
        # The backups bucket, as kept off the first site, is what the new one starts from.
        bucket = "knowledgeops-backups"
        shutil.copytree(site.s3.root / bucket, fresh.s3.root / bucket, dirs_exist_ok=True)
        embedded = fake.embedded_count()
        code, out = await fresh.cli("worker-ingest", "restore", archive)
        assert code == 0, out
        assert fake.embedded_count() == embedded, "the restore embedded again"
        lap("restore")

    await fresh.up(before_apps=restore)


async def webhooks_after_the_restore(api: Api, receiver: Receiver, tmp_path: Path) -> None:
    """The restored site delivers to the same receiver: an event delivered before comes
    again only as itself (same id, same body; receivers dedupe by id), and a new import's
    events arrive with ids never seen, in order."""
    seen = {e["event_id"]: e for e in delivered(receiver)}
    count = len(receiver.accepted)
    note = tmp_path / "after-the-restore.md"
    note.write_text("# After the restore\n\nImported on the restored site.\n")
    task = (await api.upload(note))["task_id"]
    assert (await api.wait_task(task))["status"] == "completed"

    def completed() -> bool:
        mine = [e for e in delivered(receiver)[count:] if e["task_id"] == task]
        return any(e["event_type"] == "TaskCompleted" for e in mine)

    await eventually(completed, bool, timeout=60, what="the new import's events delivered")
    later = delivered(receiver)[count:]
    again = [e for e in later if e["event_id"] in seen]
    assert all(e == seen[e["event_id"]] for e in again), again
    new = [e for e in later if e["event_id"] not in seen]
    assert [e["event_type"] for e in new if e["task_id"] == task][-1] == "TaskCompleted"
    assert [e["seq"] for e in later] == sorted({e["seq"] for e in later})
