"""Run a worker process: Temporal workers plus, when it owns the embedded index, the API.

Embedded Qdrant allows one process per storage folder, so the process that writes the index
(the worker) is also the one that answers searches. With QDRANT_URL set, any number of
workers and API processes can run side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import uvicorn

from activities.database import Database
from activities.embedding import make_embedder
from activities.vector_store import VectorStore
from knowledgeops.settings import Settings, SettingsError, load_settings
from knowledgeops.temporal import connect, ensure_search_attributes
from starter.dev_server import TemporalDevServer
from starter.http.app import create_app
from starter.http.runtime import Runtime
from starter.service import TaskQueueService
from starter.webhooks import WebhookDispatcher
from worker import build_workers

log = logging.getLogger("knowledgeops")


class _QuietSignalsServer(uvicorn.Server):
    # We own SIGINT/SIGTERM for the whole process and stop uvicorn ourselves.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def run_node(
    settings: Settings,
    stop: asyncio.Event,
    *,
    serve_api: bool,
    run_workers: bool = True,
    on_ready: Callable[[], None] | None = None,
) -> None:
    client = await connect(settings)
    await ensure_search_attributes(client, settings.temporal_namespace)
    db = await Database.open(settings)
    store = VectorStore.open(settings)
    embedder = make_embedder(settings)
    await embedder.warm_up()
    workers = build_workers(client, settings, store, embedder, db) if run_workers else []
    tasks = [asyncio.create_task(w.run()) for w in workers]
    api: _QuietSignalsServer | None = None
    if serve_api:
        service = TaskQueueService(client, settings, db)
        runtime = Runtime(settings, client, service, db, store, embedder)
        api = _QuietSignalsServer(
            uvicorn.Config(
                create_app(runtime),
                host=settings.api_host,
                port=settings.api_port,
                log_level="warning",
            )
        )
        tasks.append(asyncio.create_task(api.serve()))
        urls = [u.strip() for u in settings.webhook_urls.split(",") if u.strip()]
        if urls:
            dispatcher = WebhookDispatcher(db, urls, settings.webhook_secret)
            tasks.append(asyncio.create_task(dispatcher.run(stop)))
    if on_ready:
        on_ready()
    try:
        done, _ = await asyncio.wait(
            [*tasks, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        for t in done:
            if t in tasks and t.exception() is not None:
                raise RuntimeError(f"a component stopped unexpectedly: {t.exception()}")
    finally:
        stop.set()
        if api is not None:
            api.should_exit = True
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)
        store.close()
        await embedder.aclose()
        await db.close()


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "temporalio.activity", "temporalio.workflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _until_signal(body: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run `body(stop)` in a fresh event loop; SIGINT / SIGTERM set `stop`."""

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await body(stop)

    asyncio.run(main())
    return 0


def run_standalone_worker(settings: Settings | None = None, serve_api: bool | None = None) -> int:
    if settings is None:
        try:
            settings = load_settings()
        except SettingsError as e:
            print(e)
            return 2
    _configure_logging()
    cfg = settings
    serve = (not cfg.qdrant_url) if serve_api is None else serve_api
    return _until_signal(
        lambda stop: run_node(
            cfg,
            stop,
            serve_api=serve,
            on_ready=lambda: log.info(
                "worker ready on %s%s",
                cfg.temporal_address,
                f"; API on {cfg.resolved_api_url}" if serve else "",
            ),
        )
    )


def dev_server_for(settings: Settings) -> TemporalDevServer:
    host, _, port = settings.temporal_address.rpartition(":")
    return TemporalDevServer(
        host=host or "localhost",
        port=int(port),
        db_file=settings.temporal_db,
        log_file=Path(settings.data_dir) / "logs" / "temporal.log",
    )


def run_dev(settings: Settings) -> int:
    """Temporal dev server + worker + API in one command; Ctrl-C / SIGTERM stops all."""
    _configure_logging()
    server = dev_server_for(settings)
    if not settings.admin_tokens:
        # A fresh token per run, so the admin API is usable but never open by default.
        settings = settings.model_copy(
            update={"admin_tokens": f"{secrets.token_urlsafe(24)}:dev-admin"}
        )
    admin_token = next(iter(settings.admin_operators()))

    async def main(stop: asyncio.Event) -> None:
        server.start()
        try:
            await server.wait_ready()

            def ready() -> None:
                print(
                    "\nknowledgeops is running\n"
                    f"  Temporal:      {server.address}\n"
                    f"  Web UI:        {server.ui_url}\n"
                    f"  API:           {settings.resolved_api_url}  (docs at /docs)\n"
                    f"  Admin token:   {admin_token}\n"
                    f"  Data:          {Path(settings.data_dir).resolve()}\n"
                    "Import with `knowledgeops import FILE --follow`; Ctrl-C stops everything.\n",
                    flush=True,
                )

            await run_node(settings, stop, serve_api=True, on_ready=ready)
        finally:
            server.stop()
            print("knowledgeops stopped.", flush=True)

    return _until_signal(main)


def run_server(settings: Settings) -> int:
    """Only the Temporal dev server, configured as `dev` configures it."""
    server = dev_server_for(settings)

    async def main(stop: asyncio.Event) -> None:
        server.start()
        try:
            await server.wait_ready()
            print(f"Temporal dev server on {server.address}, Web UI {server.ui_url}", flush=True)
            await stop.wait()
        finally:
            server.stop()

    return _until_signal(main)


def run_api(settings: Settings) -> int:
    """Only the HTTP API (no workers). With the embedded index this needs the index folder to
    be free, i.e. no worker running on it: use `dev`/`worker`, or QDRANT_URL."""
    _configure_logging()

    return _until_signal(
        lambda stop: run_node(
            settings,
            stop,
            serve_api=True,
            run_workers=False,
            on_ready=lambda: print(f"API on {settings.resolved_api_url}", flush=True),
        )
    )
