"""The test environment: settings that never read the developer's environment, a fresh
database per test in the PostgreSQL pass, a running worker with its resources (`running_env`),
worker and API processes. The fixtures that hand them to tests are in tests/conftest.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic_settings import BaseSettings
from temporalio.client import Client

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.index.opening import open_index
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.models.chat import make_chat_model
from knowledgeops.models.embedding import Embedder, make_embedder
from knowledgeops.runtime.resources import Resources
from knowledgeops.runtime.temporal import connect
from starter.dev_server import free_port
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.waiting import eventually
from worker import build_workers

# Set (by .ci/run) to a PostgreSQL server URL to run the database-backed tests on PostgreSQL;
# each test then gets a database of its own. Unset: each test has its own SQLite file.
PG_URL = os.environ.get("KNOWLEDGEOPS_TEST_POSTGRES_URL", "")


@asynccontextmanager
async def fresh_database(prefix: str) -> AsyncIterator[str]:
    """A new, empty PostgreSQL database's URL, dropped afterwards; "" without PostgreSQL (the
    SQLite database under a test's new data directory is empty anyway)."""
    if not PG_URL:
        yield ""
        return
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin_dsn = PG_URL.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(admin_dsn)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    try:
        yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        conn = await asyncpg.connect(admin_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


class HermeticSettings(Settings):
    """What a test passes, else the defaults: never the developer's environment or `.env`
    (a QDRANT_URL or WEBHOOK_URLS set there must not reach a test)."""

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: Any, *_others: Any, **_kw: Any
    ) -> tuple[Any, ...]:
        return (init_settings,)


def openai_settings(settings: Settings, fake: FakeOpenAI, **overrides: object) -> Settings:
    return settings.model_copy(
        update={
            "embedding_provider": "openai",
            "embedding_model": "fake-embed",
            "openai_base_url": fake.base_url,
            "openai_api_key": fake.api_key,
            "openai_timeout_seconds": 2.0,
            "embedding_batch_size": 16,
            **overrides,
        }
    )


def chat_settings(settings: Settings, fake: FakeOpenAI, **overrides: object) -> Settings:
    """Chat and vision models on the fake server; embeddings stay as they were (local)."""
    return settings.model_copy(
        update={
            "chat_model": "fake-chat",
            "vision_model": "fake-vision",
            "openai_base_url": fake.base_url,
            "openai_api_key": fake.api_key,
            "chat_timeout_seconds": 5.0,
            "openai_max_retries": 3,
            **overrides,
        }
    )


def rerank_settings(
    settings: Settings, fake: FakeOpenAI, route: str = "/rerank", **overrides: object
) -> Settings:
    """Reranking on one of the fake server's rerank routes (`/rerank`: TEI, `/v1/rerank`,
    `/v2/rerank`: Cohere/Jina)."""
    return settings.model_copy(
        update={
            "rerank_url": fake.rerank_url(route),
            "rerank_model": "fake-rerank",
            "rerank_api_key": fake.api_key,
            "rerank_timeout_seconds": 2.0,
            **overrides,
        }
    )


@dataclass
class Env:
    client: Client
    settings: Settings
    service: TaskQueueService
    documents: DocumentService
    embedder: Embedder
    _store: VectorIndex | None
    db: Database

    @property
    def store(self) -> VectorIndex:
        assert self._store is not None, "this Env does not open the index (worker=False)"
        return self._store

    async def live_chunks(self, document_id: str) -> ChunkReader:
        """A reader of the document's live version."""
        version = await LiveVersions(self.db, self.settings.chunks_dir).get(document_id)
        return ChunkReader(self.settings.chunks_dir, document_id, version)

    async def points(self, document_id: str | None = None, *, staged: bool = False) -> int:
        """Searchable points (of a document); with `staged`, an import's unpublished ones too."""
        collection = VectorIndex.collection_name(self.embedder.model_id)
        return await self.store.count(collection, document_id, staged=staged)


@asynccontextmanager
async def running_env(settings: Settings, *, worker: bool = True) -> AsyncIterator[Env]:
    """Client and service; with `worker`, also the index and an in-process worker.

    Without a worker the index is left closed: embedded Qdrant admits one process, and a
    worker subprocess may own it."""
    client = await connect(settings)
    store = open_index(settings) if worker else None
    embedder = make_embedder(settings)
    db = await Database.open(settings)
    service = TaskQueueService(client, settings, db)
    documents = DocumentService(service, db, settings, store)
    env = Env(client, settings, service, documents, embedder, store, db)
    chat, vision = make_chat_model(settings), make_chat_model(settings, vision=True)
    resources = (
        Resources(settings, db, store, embedder, chat, vision) if store is not None else None
    )
    workers = build_workers(client, resources) if resources is not None else []
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield env
    finally:
        if os.environ.get("KNOWLEDGEOPS_RECORD_HISTORIES"):
            await record_histories(client, settings)
        await asyncio.gather(*(w.shutdown() for w in workers))
        await asyncio.gather(*tasks, return_exceptions=True)
        if store is not None:
            store.close()
        await embedder.aclose()
        for model in (chat, vision):
            if model is not None:
                await model.aclose()
        await db.close()


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# One completed history of every workflow type, replayed against the current code by
# tests/platform/test_replay.py: a change that would break a running task fails there. Recorded by a
# run of the suite with KNOWLEDGEOPS_RECORD_HISTORIES=1 (a type's file is kept once written).
HISTORIES = Path(__file__).resolve().parents[1] / "data" / "histories"


async def record_histories(client: Client, settings: Settings) -> None:
    query = f'WorkflowId STARTS_WITH "{settings.prefix}" AND ExecutionStatus = "Completed"'
    async for w in client.list_workflows(query):
        path = HISTORIES / f"{w.workflow_type}.json"
        if not path.exists():
            history = await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
            HISTORIES.mkdir(parents=True, exist_ok=True)
            path.write_text(history.to_json())


ROOT = Path(__file__).resolve().parents[2]


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a subprocess load exactly these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OUR_VARS)}
    return env | settings.to_env() | {"PYTHONUNBUFFERED": "1"}


# Every variable a setting reads (their aliases): a child sees only the test's values.
_OUR_VARS = tuple(f.alias for f in Settings.model_fields.values() if f.alias)


def start_worker_process(settings: Settings, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "worker.py"), *args],
            cwd=ROOT,
            env=settings_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@asynccontextmanager
async def worker_serving_api(
    cfg: Settings, log: Path, *args: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A worker subprocess serving the API, once it answers; stopped cleanly after."""
    worker = start_worker_process(cfg, log, *args)
    api = f"http://127.0.0.1:{cfg.api_port}"
    try:
        async with httpx.AsyncClient(timeout=10) as http:

            async def healthz() -> int:
                try:
                    return (await http.get(f"{api}/healthz")).status_code
                except httpx.TransportError:
                    return 0  # not listening yet

            await eventually(healthz, lambda code: code == 200, timeout=60, what=f"{api}/healthz")
            yield http, api
    finally:
        assert stop_process(worker) == 0


@dataclass
class Api:
    http: httpx.AsyncClient
    settings: Settings
    admin: dict[str, str]

    async def upload(self, path: Path, **form: str) -> dict[str, Any]:
        """Upload a file (202 expected); the API's answer."""
        files = {"file": (path.name, await asyncio.to_thread(path.read_bytes))}
        r = await self.http.post("/v1/documents", files=files, data=form)
        assert r.status_code == 202, r.text
        body: dict[str, Any] = r.json()
        return body

    async def wait_task(self, task_id: str, timeout: float = 90) -> dict[str, Any]:
        async def status() -> dict[str, Any]:
            r = await self.http.get(f"/v1/tasks/{task_id}")
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body

        closed = ("completed", "failed", "cancelled", "terminated", "timed_out")
        return await eventually(
            status, lambda body: body["status"] in closed, timeout=timeout, what=f"{task_id} closed"
        )


ADMIN_TOKEN = "test-admin-token"
# The public API's token the `Api` helper sends by default (API_TOKENS of running_api).
API_TOKEN = "test-api-token-0123456789"


@asynccontextmanager
async def running_api(
    settings: Settings,
    *,
    workers: bool = True,
    admin_tokens: str = f"{ADMIN_TOKEN}:alice",
    api_tokens: str = f"{API_TOKEN}:tester",
) -> AsyncIterator[Api]:
    """The production composition (the worker process serving the API, or the API alone) on
    a free port, over real HTTP."""
    from starter.processes import serve_api_only
    from worker import run_worker

    # A port picked now, not when the settings were made: an outgoing connection of the test
    # meanwhile can take a port picked earlier (seen once: "address already in use").
    settings = settings.model_copy(
        update={"admin_tokens": admin_tokens, "api_tokens": api_tokens, "api_port": free_port()}
    )
    stop = asyncio.Event()
    node = asyncio.create_task(
        run_worker(settings, stop, serve_api=True) if workers else serve_api_only(settings, stop)
    )
    base = f"http://{settings.api_host}:{settings.api_port}"

    async def api_token(request: httpx.Request) -> None:
        # The public API's token on public routes, unless a request brings its own
        # Authorization; admin routes get only what a test passes (api.admin).
        public = not request.url.path.startswith("/v1/admin")
        if public and API_TOKEN in api_tokens and "authorization" not in request.headers:
            request.headers["Authorization"] = f"Bearer {API_TOKEN}"

    hooks = {"request": [api_token]}
    async with httpx.AsyncClient(base_url=base, timeout=60, event_hooks=hooks) as http:

        async def healthz() -> int:
            assert not node.done(), node.exception()
            try:
                return (await http.get("/healthz")).status_code
            except httpx.TransportError:
                return 0  # not listening yet

        await eventually(healthz, lambda code: code == 200, interval=0.05, what="/healthz")
        try:
            yield Api(http, settings, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
        finally:
            stop.set()
            await node
