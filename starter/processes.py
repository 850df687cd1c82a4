"""Launching the system's processes: `dev` (Temporal dev server + worker process, which also
serves the API), `server` (only Temporal), `api` (only the HTTP API), and the plumbing every
long-running process shares (logging, signals, stopping when a component dies).

`dev` runs the worker as a child process (`python -m worker`), so nothing here imports the
worker: the launcher supervises its children and stops them in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import prepare_schema
from knowledgeops.files.data_files import check_storage, keep_working_copy_trimmed
from knowledgeops.observability.log_format import JsonLogFormatter
from knowledgeops.runtime.resources import open_resources
from knowledgeops.runtime.temporal import connect, ensure_search_attributes
from starter.dev_server import TemporalDevServer, detach_child, port_in_use
from starter.http.access import check_exposure
from starter.http.serve import ApiServer

log = logging.getLogger("knowledgeops")
# How long `dev` waits for its worker process to load the model and serve the API.
WORKER_READY_SECONDS = 180.0
# A dev server that dies is restarted, unless it died this often this recently (a crash loop).
RESTARTS_ALLOWED = 3
RESTART_WINDOW = 300.0
# `knowledgeops worker`: how long past WORKER_SHUTDOWN_GRACE_SECONDS its worker process may take
# to stop after SIGTERM (closing the workers, the parser and model processes) before it is
# killed. docker-compose.yml's stop_grace_period (60 s) covers the default 5 + 25 s.
WORKER_STOP_MARGIN = 25.0


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler()
    if settings.log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # Alembic says at INFO what every start does (its context, each migration step); httpx
    # (and httpx2, the `openai` client's) a line for every request, every embedding call too.
    for noisy in ("httpx", "httpx2", "temporalio.activity", "temporalio.workflow", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def until_signal(body: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run `body(stop)` in a fresh event loop; SIGINT / SIGTERM set `stop`."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await body(stop)

    asyncio.run(main())
    return 0


async def run_until_stopped(tasks: Sequence[asyncio.Task[Any]], stop: asyncio.Event) -> None:
    """Wait for `stop`; a component that ends first stops the process with its error."""
    waiter = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        waiter.cancel()
    for t in done:
        if t is not waiter and t.exception() is not None:
            raise RuntimeError(f"a component stopped unexpectedly: {t.exception()}")


async def serve_api_only(
    settings: Settings,
    stop: asyncio.Event,
    on_ready: Callable[[], None] | None = None,
    *,
    migrate: bool = True,
) -> None:
    """The HTTP API with no workers (with the embedded index it needs the folder free).
    `migrate=False`: the database's schema was prepared already (run_api: prepare_schema)."""
    await check_storage(settings)
    client = await connect(settings, fail_fast=True)
    await ensure_search_attributes(client, settings.temporal_namespace)
    async with open_resources(settings, migrate=migrate) as resources:
        api = ApiServer(client, resources, stop)
        tasks = api.start()
        if resources.files.shared:
            trim = keep_working_copy_trimmed(resources.files, settings, stop)
            tasks.append(asyncio.create_task(trim))
        if on_ready:
            on_ready()
        try:
            await run_until_stopped(tasks, stop)
        finally:
            api.stop()
            await asyncio.gather(*tasks, return_exceptions=True)


def worker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "worker", *args]


def run_worker(settings: Settings, *args: str) -> int:
    """`knowledgeops worker`: the worker process in the foreground, as this process's child.
    SIGTERM and SIGINT are passed on to it and it is given its grace period to drain
    (WORKER_SHUTDOWN_GRACE_SECONDS + WORKER_STOP_MARGIN): in a container this launcher is
    PID 1, the only process `docker stop` signals."""
    if "--no-api" not in args and not settings.qdrant_url:
        check_exposure(settings)
    grace = settings.worker_shutdown_grace_seconds + WORKER_STOP_MARGIN
    return run_forwarding_signals(worker_command(*args), _child_env(settings), grace)


def run_forwarding_signals(command: Sequence[str], env: dict[str, str], grace: float) -> int:
    """Run `command` until it exits; SIGTERM / SIGINT here are passed on to it, and it is
    killed if still running `grace` seconds after the first. Its exit code: 128 + N when
    killed by signal N (the shell's convention); 130 for a Ctrl-C it stopped on cleanly."""
    child: subprocess.Popen[bytes] | None = None
    received: list[int] = []
    overdue: list[threading.Timer] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if child is None:
            return  # not started yet: passed on right after the start, below
        name = signal.Signals(signum).name
        # send_signal skips a child already reaped, so a late signal never hits a reused pid.
        child.send_signal(signum)
        if not overdue:
            print(
                f"{name}: stopping the worker process (pid {child.pid}); running activities "
                f"get up to {grace:.0f} s to finish",
                file=sys.stderr,
                flush=True,
            )
            timer = threading.Timer(grace, _kill_overdue, (child, name, grace))
            timer.daemon = True
            overdue.append(timer)
            timer.start()

    # Handlers before the start: a signal in between would otherwise kill this launcher (or,
    # as PID 1, be ignored) and leave the worker running.
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # Its own session (a terminal's Ctrl-C reaches it once, through here) and SIGTERM
        # should this launcher be killed, so the worker still drains instead of running on.
        child = subprocess.Popen(command, env=env, preexec_fn=detach_child)
        if received:
            forward(received[-1], None)
        code = child.wait()
    finally:
        for timer in overdue:
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code < 0:
        return 128 - code
    if code == 0 and received and received[0] == signal.SIGINT:
        return 130  # Ctrl-C, as every other command reports it
    return code


def _kill_overdue(child: subprocess.Popen[bytes], name: str, grace: float) -> None:
    print(
        f"error: the worker process did not stop within {grace:.0f} s of {name}; killing it "
        "(its running activities are retried once their heartbeat timeout lapses)",
        file=sys.stderr,
        flush=True,
    )
    child.kill()


def _child_env(settings: Settings) -> dict[str, str]:
    return dict(os.environ) | settings.to_env()


def dev_server_for(settings: Settings) -> TemporalDevServer:
    host, _, port = settings.temporal_address.rpartition(":")
    return TemporalDevServer(
        host=host or "localhost",
        port=int(port),
        db_file=settings.temporal_db,
        log_file=Path(settings.data_dir) / "logs" / "temporal.log",
    )


def check_ports_free(settings: Settings, server: TemporalDevServer) -> None:
    """Stop `dev` before it starts anything when a port it needs is taken: a worker whose API
    cannot bind would otherwise leave `dev` waiting for an API that never answers."""
    wanted = [
        (settings.api_host, settings.api_port, "API_PORT"),
        (server.host, server.port, "TEMPORAL_ADDRESS"),
        (server.host, server.ui_port, "TEMPORAL_ADDRESS (the Web UI is on its port + 1000)"),
    ]
    for host, port, setting in wanted:
        if port_in_use(host, port):
            raise RuntimeError(
                f"port {port} on {host} is already in use (is knowledgeops or another server "
                f"running?); stop that process, or set {setting} to another port"
            )


async def _wait_for_api(
    settings: Settings, worker: subprocess.Popen[bytes], stop: asyncio.Event
) -> None:
    url = f"{settings.resolved_api_url}/healthz"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKER_READY_SECONDS
    async with httpx.AsyncClient(timeout=2) as http:
        while loop.time() < deadline:
            if stop.is_set():
                return  # Ctrl-C while starting: the caller stops everything
            if worker.poll() is not None:
                raise RuntimeError(f"the worker process exited with code {worker.returncode}")
            try:
                if (await http.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            await asyncio.sleep(0.3)
    raise TimeoutError(f"the worker did not serve {url} within {WORKER_READY_SECONDS:.0f} s")


async def _restart_server(server: TemporalDevServer, restarts: list[float]) -> bool:
    """Start a dead dev server again on the same SQLite file (every task is still there);
    False once it has died RESTARTS_ALLOWED times within RESTART_WINDOW seconds."""
    now = asyncio.get_running_loop().time()
    restarts[:] = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
    if len(restarts) > RESTARTS_ALLOWED:
        print(
            f"error: the Temporal dev server keeps dying ({len(restarts)} times in "
            f"{RESTART_WINDOW:.0f} s); giving up. See {server.log_file}",
            flush=True,
        )
        return False
    print(
        f"the Temporal dev server exited (code {server.returncode}); restarting it "
        f"(its SQLite file keeps every task). See {server.log_file}",
        flush=True,
    )
    server.stop()
    server.start()
    await server.wait_ready()
    print(f"Temporal dev server back on {server.address}", flush=True)
    return True


async def _supervise(
    server: TemporalDevServer, worker: subprocess.Popen[bytes] | None, stop: asyncio.Event
) -> int:
    """Until `stop`: a dead dev server is restarted (bounded); a dead worker ends `dev` with
    a message and a non-zero exit (its log above says why)."""
    restarts: list[float] = []
    while not stop.is_set():
        if worker is not None and worker.poll() is not None:
            print(f"error: the worker process exited (code {worker.returncode})", flush=True)
            return 1
        if not server.running and not await _restart_server(server, restarts):
            return 1
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            continue
    return 0


def _access_line(settings: Settings) -> str:
    if settings.api_callers():
        return "bearer tokens (API_TOKENS)"
    return (
        "open, loopback only; set API_TOKENS=token:caller[:owner] to require tokens "
        "(required for a non-loopback API_HOST)"
    )


def run_dev(settings: Settings) -> int:
    """Temporal dev server + worker (+ API) in one process tree; Ctrl-C / SIGTERM stops all."""
    check_exposure(settings)  # before anything starts
    configure_logging(settings)
    server = dev_server_for(settings)
    check_ports_free(settings, server)
    if not settings.admin_tokens:
        # A fresh token per run, so the admin API is usable but never open by default.
        settings = settings.model_copy(
            update={"admin_tokens": f"{secrets.token_urlsafe(24)}:dev-admin"}
        )
    admin_token = next(iter(settings.admin_operators()))
    data_dir = Path(settings.data_dir).resolve()
    code = 0

    async def main(stop: asyncio.Event) -> None:
        nonlocal code
        server.start()
        worker: subprocess.Popen[bytes] | None = None
        try:
            await server.wait_ready()
            # A fork + exec returns at once; the child's start-up is awaited below.
            worker = subprocess.Popen(  # noqa: ASYNC220
                worker_command(), env=_child_env(settings), preexec_fn=detach_child
            )
            await _wait_for_api(settings, worker, stop)
            if stop.is_set():
                return
            print(
                "\nknowledgeops is running\n"
                f"  Temporal:      {server.address}\n"
                f"  Web UI:        {server.ui_url}\n"
                f"  API:           {settings.resolved_api_url}  (docs at /docs)\n"
                f"  Admin token:   {admin_token}\n"
                f"  API access:    {_access_line(settings)}\n"
                f"  Data:          {data_dir}\n"
                "Import with `knowledgeops import FILE --follow`; Ctrl-C stops everything.\n",
                flush=True,
            )
            code = await _supervise(server, worker, stop)
        finally:
            if worker is not None and worker.poll() is None:
                worker.terminate()
                try:
                    await asyncio.to_thread(worker.wait, 30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
            server.stop()
            print("knowledgeops stopped.", flush=True)

    until_signal(main)
    return code


def run_server(settings: Settings) -> int:
    """Only the Temporal dev server, configured as `dev` configures it."""
    server = dev_server_for(settings)

    code = 0

    async def main(stop: asyncio.Event) -> None:
        nonlocal code
        server.start()
        try:
            await server.wait_ready()
            print(f"Temporal dev server on {server.address}, Web UI {server.ui_url}", flush=True)
            code = await _supervise(server, None, stop)
        finally:
            server.stop()

    until_signal(main)
    return code


def run_api(settings: Settings) -> int:
    """Only the HTTP API (no workers). With the embedded index this needs the index folder to
    be free, i.e. no worker running on it: use `dev`/`worker`, or QDRANT_URL."""
    check_exposure(settings)
    configure_logging(settings)
    # Before anything starts; SchemaNotAtHeadError is main's one-line error, exit 1.
    asyncio.run(prepare_schema(settings))
    return until_signal(
        lambda stop: serve_api_only(
            settings,
            stop,
            lambda: print(f"API on {settings.resolved_api_url}", flush=True),
            migrate=False,
        )
    )
