"""One site of a compose rehearsal: every service of docker-compose.yml brought up on this
machine in the order its depends_on allows, each as SERVICE_ROLES says
(tests/helpers/compose_rehearsal.py), the application's processes on hosts of their own
(folders) sharing only PostgreSQL, Temporal and the S3 store, as the stack's services would on
machines of their own."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from knowledgeops.registry.task_types import Pool
from tests.helpers.compose_hosts import (
    ComposeTemporal,
    HostProcess,
    dynamic_config,
    start_like_the_image,
)
from tests.helpers.compose_rehearsal import (
    SERVICE_ROLES,
    TEMPORAL_IMAGE_WORKDIR,
    VENV_BIN,
    Kind,
    Row,
    argv,
    depends_on,
    folded_env,
    healthcheck,
    host_path,
    listen_here,
    mapped_env,
    one_shot,
    pools,
    start_waves,
    unescaped,
)
from tests.helpers.postgres import PostgresCluster, postgres_cluster
from tests.helpers.s3_server import S3Server, rclone_s3
from tests.helpers.waiting import eventually

FOLDED_HOST = "index-node"  # the host of the one process the folded services run as
READY_SECONDS = 90.0


class Site:
    """A deployment of the stack on this machine; `up()` starts it, `close()` removes it all
    (processes first), whatever happened."""

    def __init__(
        self, name: str, root: Path, services: dict[str, Any], extra_env: dict[str, str]
    ) -> None:
        self.name = name
        self.root = root
        self.services = services
        # Not compose's: what the rehearsal adds to every application service (the embedder,
        # the webhook receiver).
        self.extra_env = extra_env
        self.addresses: dict[str, str] = {}  # compose service -> its stand-in's 127.0.0.1:port
        self.rows: dict[str, str] = {}  # service -> how it was rehearsed
        self.took: dict[str, float] = {}  # service -> seconds until it was up / done
        self.running: dict[str, HostProcess] = {}  # long-running, by service (folded: each)
        self.jobs: list[HostProcess] = []
        self.events: list[tuple[str, str]] = []  # ("start" | "exit", service), in order
        self.api_url = ""
        self.cluster: PostgresCluster | None = None
        self.temporal: ComposeTemporal | None = None
        self.s3: S3Server | None = None
        self._stack = ExitStack()

    # -- where each service runs and with what -------------------------------------------------

    def folded(self) -> list[str]:
        return [n for n in self.services if SERVICE_ROLES[n] is Kind.FOLDED]

    def host(self, service: str) -> Path:
        name = FOLDED_HOST if SERVICE_ROLES[service] is Kind.FOLDED else service
        return self.root / "hosts" / name

    def is_app(self, service: str) -> bool:
        return bool((self.services[service].get("command") or [""])[0] == "knowledgeops")

    def env(self, service: str) -> dict[str, str]:
        host = self.host(service)
        if SERVICE_ROLES[service] is Kind.FOLDED:
            env = folded_env(self.services, self.folded(), self.addresses, host)
        else:
            env = mapped_env(self.services[service], self.addresses, host)
        return env | (self.extra_env if self.is_app(service) else {})

    def folded_command(self) -> list[str]:
        """The folded services as one worker: every pool their commands name, serving the API
        (what `api` does) since it owns the embedded index."""
        named = {p for n in self.folded() for p in pools(self.services[n]["command"])}
        ordered = [pool.value for pool in Pool if pool.value in named]  # the registry's order
        assert len(ordered) == len(named), f"pools the registry does not know: {named}"
        flags = [word for pool in ordered for word in ("--pool", pool)]
        return [str(VENV_BIN / "knowledgeops"), "worker", *flags]

    async def cli(self, service: str, *args: str, timeout: float = 180) -> tuple[int, str]:
        """`docker compose run --rm SERVICE knowledgeops ARGS`: a command with that service's
        settings on its host."""
        command = [str(VENV_BIN / "knowledgeops"), *args]
        job = HostProcess(f"{service}-run", command, self.env(service), self.host(service))
        self.jobs.append(job)
        done = await asyncio.to_thread(job.run, timeout)
        return done.returncode, done.stdout + done.stderr

    # -- bringing it up --------------------------------------------------------------------------

    async def up(self, before_apps: Callable[[], Awaitable[None]] | None = None) -> None:
        """Every service as `docker compose up` starts them: in waves, each service once what
        it depends on is up or done (as its condition says), a wave's together. `before_apps`
        runs once every one-shot job is done, before any long-running application process
        starts (where an operator restores a backup)."""
        for wave in start_waves(self.services):
            for name in wave:
                for dep, condition in depends_on(self.services[name]).items():
                    # A service is in `rows` once it is up, a one-shot job once it exited 0.
                    assert dep in self.rows, f"{name} would start before {dep} is {condition}"
            apps = [n for n in wave if self.is_app(n) and not one_shot(self.services[n])]
            if apps and before_apps is not None:
                await before_apps()
                before_apps = None
            folded = [n for n in wave if SERVICE_ROLES[n] is Kind.FOLDED]
            assert folded in ([], self.folded()), "the folded services start at different times"
            try:
                async with asyncio.TaskGroup() as starting:
                    for name in [n for n in wave if n not in folded[1:]]:
                        starting.create_task(self._timed(name))
            except* Exception as failed:
                raise failed.exceptions[0] from None  # the first failure, readably
            for name in folded[1:]:
                self.rows[name] = f"folded into the same process (see {folded[0]})"
                self.took[name] = self.took[folded[0]]

    async def _timed(self, name: str) -> None:
        started = time.monotonic()
        await self._bring_up(name, SERVICE_ROLES[name])
        self.took[name] = time.monotonic() - started

    async def _bring_up(self, name: str, kind: Kind) -> None:
        # A stand-in reads its service's settings as compose gives them (no host to map).
        env = {k: unescaped(v) for k, v in (self.services[name].get("environment") or {}).items()}
        if kind is Kind.OWN_CLUSTER:
            # initdb takes seconds: off the loop, so the wave's other services start meanwhile.
            self.cluster = await asyncio.to_thread(self._stack.enter_context, postgres_cluster())
            await asyncio.to_thread(start_like_the_image, self.cluster, env)
            self.addresses[name] = f"127.0.0.1:{self.cluster.port}"
            version = self.cluster.bin.parent.name
            how = f"a PostgreSQL {version} cluster of the test's own on {self.addresses[name]}"
            self.rows[name] = f"substituted by {how} (POSTGRES_USER, its database, passwords)"
        elif kind is Kind.DEV_SCHEMA:
            self.rows[name] = "substituted: the Temporal dev server makes its own (SQLite) schema"
        elif kind is Kind.DEV_SERVER:
            await self._temporal(name, env)
        elif kind is Kind.DEV_UI:
            assert self.temporal is not None
            await _answers(self.temporal.ui_url)
            self.rows[name] = f"substituted by the dev server's own Web UI, {self.temporal.ui_url}"
        elif kind is Kind.EMBEDDED_INDEX:
            self.rows[name] = (
                "substituted by the embedded index (Qdrant Edge) in the folded process: "
                "QDRANT_URL and QDRANT_API_KEY dropped from every application service"
            )
        elif kind is Kind.RCLONE:
            key, secret = env["MINIO_ROOT_USER"], env["MINIO_ROOT_PASSWORD"]
            s3 = rclone_s3(self.root / "s3", "rehearsal", "", key=key, secret=secret)
            self.s3 = self._stack.enter_context(s3)
            self.addresses[name] = self.s3.endpoint.removeprefix("http://")
            self.rows[name] = f"substituted by `rclone serve s3` on {self.s3.endpoint}, same keys"
        elif kind is Kind.BUCKET_FOLDERS:
            self._buckets(name)
        elif kind is Kind.COMMAND:
            await self._command(name)
        else:
            await self._start_folded(name)

    async def _temporal(self, name: str, env: dict[str, str]) -> None:
        service = self.services[name]
        config_file = f"{TEMPORAL_IMAGE_WORKDIR}/{env['DYNAMIC_CONFIG_FILE_PATH']}"
        config = dynamic_config(Path(host_path(service, config_file, self.host(name))))
        self.temporal = ComposeTemporal(self.root / "temporal", config)
        self.temporal.start()
        self._stack.callback(self.temporal.stop)
        await self.temporal.wait_ready()
        self.addresses[name] = self.temporal.address
        self.rows[name] = (
            f"substituted by the Temporal dev server (SQLite) on {self.temporal.address}, "
            f"with the dynamic config the service mounts ({', '.join(config)})"
        )

    def _buckets(self, name: str) -> None:
        """What `mc mb` makes: rclone serves each top-level folder as a bucket."""
        assert self.s3 is not None
        script = " ".join(self.services[name].get("command") or [])
        buckets = re.findall(r"\bmc mb (?:--ignore-existing )?\w+/([a-z0-9.-]+)", script)
        assert buckets, f"{name}: no `mc mb` in its command: {script!r}"
        for bucket in buckets:
            (self.s3.root / bucket).mkdir(exist_ok=True)  # --ignore-existing
        self.rows[name] = f"substituted: buckets {', '.join(buckets)} made as rclone's folders"

    async def _command(self, name: str) -> None:
        service = self.services[name]
        host = self.host(name)
        env = self.env(name)
        ports = listen_here(env)
        proc = HostProcess(name, argv(service, host), env, host)
        proc.health = healthcheck(service, ports)
        shown = " ".join([*(service.get("entrypoint") or []), *(service.get("command") or [])])
        shown = shown if len(shown) < 70 else shown[:66] + " ..."
        self.events.append(("start", name))
        if one_shot(service):
            self.jobs.append(proc)
            done = await asyncio.to_thread(proc.run, 180)
            assert done.returncode == 0, f"{name} exited {done.returncode}:\n{proc.output()}"
            self.events.append(("exit", name))
            self.rows[name] = f"as compose says, one-shot, exit 0: `{shown}`"
            return
        self.running[name] = proc
        proc.start()
        await self.ready(name)
        healthy = "healthy by its healthcheck" if proc.health else "ready"
        self.rows[name] = f"as compose says, its own host folder, {healthy}: `{shown}`"

    async def _start_folded(self, first: str) -> None:
        names = self.folded()
        for name in names:  # one process: it starts once all of them could
            for dep in depends_on(self.services[name]):
                assert dep in self.rows, f"{name} (folded) would start before {dep}"
        # It serves the API as the `api` service does: that one's listen settings and health.
        api = next(n for n in names if "API_PORT" in self.services[n]["environment"])
        env = self.env(first) | {
            key: str(self.services[api]["environment"][key]) for key in ("API_HOST", "API_PORT")
        }
        ports = listen_here(env)
        proc = HostProcess(FOLDED_HOST, self.folded_command(), env, self.host(first))
        proc.health = healthcheck(self.services[api], ports)
        for name in names:
            self.events.append(("start", name))
            self.running[name] = proc
        proc.start()
        self.api_url = f"http://127.0.0.1:{env['API_PORT']}"
        await self.ready(first)
        shown = " ".join(["knowledgeops", *proc.argv[1:]])
        self.rows[first] = (
            f"folded into ONE process `{shown}` serving the API on {self.api_url} "
            f"(with {', '.join(n for n in names if n != first)}): the embedded index admits "
            "one process"
        )

    async def ready(self, name: str) -> None:
        """Up: its compose healthcheck passes (or, with none, the worker says it is ready)."""
        proc = self.running[name]

        async def state() -> str:
            if not proc.alive:
                return "exited"
            if proc.health is None:
                return "ready" if "worker ready" in proc.output() else "starting"
            return "ready" if await asyncio.to_thread(proc.healthy) else "starting"

        def settled(s: str) -> bool:
            return s != "starting"

        got = await eventually(state, settled, timeout=READY_SECONDS, what=f"{name} up")
        code = proc.proc.returncode if proc.proc else None
        assert got == "ready", f"{name} exited ({code}):\n{proc.output()[-4000:]}"

    async def restart(self, name: str) -> None:
        """The service's command again on the same host (compose's `restart: unless-stopped`)."""
        old = self.running[name]
        proc = HostProcess(old.name, old.argv, old.env, old.host)
        proc.health = old.health
        self.running[name] = proc
        self.events.append(("start", name))
        proc.start()
        await self.ready(name)

    def processes(self) -> list[HostProcess]:
        unique = {id(p): p for p in [*self.running.values(), *self.jobs]}
        return list(unique.values())

    def close(self) -> None:
        """Every process first (nothing left running), then the stand-ins."""
        try:
            for proc in self.processes():
                proc.kill()
        finally:
            self._stack.close()

    def rehearsed(self) -> list[Row]:
        return [
            Row(name, f"{self.rows.get(name, 'NOT STARTED')} [{self.took.get(name, 0):.0f} s]")
            for name in self.services
        ]


async def _answers(url: str) -> None:
    async def status() -> int:
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                return (await http.get(url)).status_code
        except httpx.TransportError:
            return 0

    def ok(code: int) -> bool:
        return code == 200

    await eventually(status, ok, timeout=30, what=url)
