"""The processes and stand-ins of a compose rehearsal (tests/helpers/compose_site.py): a
service's process on a host of its own (a folder; every process it starts is found by a marker
in its environment, as a container holds them, so it is stopped as `docker stop` does and
killed as `docker kill` does), the Temporal dev server standing in for the `temporal` service,
and what the postgres image does at its first start, on a cluster of the test's own."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import yaml

from starter.dev_server import TemporalDevServer, free_port, temporal_binary
from tests.helpers.compose_rehearsal import VENV_BIN
from tests.helpers.postgres import PostgresCluster, postgres_bin
from tests.helpers.waiting import eventually_sync

# In the environment of every process a rehearsed service starts (inherited by its children):
# which "container" it belongs to.
MARKER = "KNOWLEDGEOPS_REHEARSAL_CONTAINER"


def base_env(host: Path, marker: str) -> dict[str, str]:
    """What a container's environment holds besides the service's settings: nothing of the
    test's own environment (no developer setting reaches a service)."""
    pg = postgres_bin()  # psql for app-db, pg_dump / pg_restore for backups and restores
    path = [str(VENV_BIN), *([str(pg)] if pg else []), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": ":".join(path),
        "HOME": str(host),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        MARKER: marker,
    }


class HostProcess:
    """One run of a service's command on its host (the folder is its working directory and
    holds its log)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], host: Path) -> None:
        self.name = name
        self.argv = argv
        self.host = host
        self.marker = f"{name}-{uuid.uuid4().hex[:12]}"
        # This run's marker last: a restart passes on the environment of the run before.
        self.env = base_env(host, self.marker) | env | {MARKER: self.marker}
        self.log = host / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # Its compose healthcheck as a command here (compose_rehearsal.healthcheck), if any.
        self.health: list[str] | None = None
        self._log_from = 0  # where this run's output starts (a restart appends to the log)

    def _new_run(self) -> None:
        self.host.mkdir(parents=True, exist_ok=True)
        self._log_from = self.log.stat().st_size if self.log.exists() else 0

    def start(self) -> None:
        self._new_run()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.host,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def run(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A one-shot job, to its end; its output is in its log too."""
        self._new_run()
        try:
            done = subprocess.run(
                self.argv,
                cwd=self.host,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            self.kill()  # a job that timed out leaves nothing behind
        with self.log.open("a") as out:
            out.write(done.stdout + done.stderr)
        return done

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        """Its healthcheck passes now, run as `docker exec` would (in its environment)."""
        assert self.health is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            done = subprocess.run(self.health, env=self.env, capture_output=True, timeout=10)
            return done.returncode == 0
        return False

    def output(self) -> str:
        """What this run wrote."""
        if not self.log.exists():
            return ""
        with self.log.open("rb") as f:
            f.seek(self._log_from)
            return f.read().decode(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """Every process of this run still there, its children's children included."""
        found = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):  # gone meanwhile, or a zombie
                if p.environ().get(MARKER) == self.marker:
                    found.append(p)
        return found

    def kill(self) -> None:
        """SIGKILL to every process of it at once, as `docker kill` does to a container."""
        if self.proc is not None:
            self.proc.kill()  # no-op once it was reaped
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                p.kill()
        if self.proc is not None:
            self.proc.wait(30)
        eventually_sync(self.processes, lambda ps: ps == [], timeout=15, what=f"{self.name} gone")

    def stop(self, grace: float) -> tuple[int, list[str]]:
        """`docker stop`: SIGTERM to the main process only, SIGKILL to all after `grace`. Its
        exit code, and what still ran once it had exited (a container's end kills that)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode, [f"the main process, still running after {grace:g} s"]
        # A child killed with its parent (PR_SET_PDEATHSIG) may take a moment to go.
        deadline = time.monotonic() + 5
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        names = []
        for p in left:
            with contextlib.suppress(psutil.Error):
                names.append(f"{p.pid} {' '.join(p.cmdline())}")
        self.kill()
        return code, names


def dynamic_config(path: Path) -> dict[str, object]:
    """Temporal's dynamic config file as the dev server takes it (KEY=VALUE): each key's one
    value with no constraints, which is what the stack's file holds."""
    values: dict[str, object] = {}
    for key, entries in (yaml.safe_load(path.read_text()) or {}).items():
        assert len(entries) == 1 and not entries[0].get("constraints"), (
            f"{path}: {key} has constraints or several values; the dev server takes one value"
        )
        values[key] = entries[0]["value"]
    return values


class ComposeTemporal(TemporalDevServer):
    """The dev server standing in for compose's `temporal`: the values of the dynamic config
    file that service mounts, a Web UI (for `temporal-ui`), and no search attributes of its
    own, so what registers them is the `temporal-setup` job's script."""

    def __init__(self, folder: Path, config: dict[str, object]) -> None:
        super().__init__(
            host="127.0.0.1",
            port=free_port(),
            db_file=folder / "temporal.db",
            log_file=folder / "temporal.log",
            ui_port=free_port(),
        )
        self.config = config

    def command(self) -> list[str]:
        assert self.db_file is not None
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.host]
        cmd += ["--port", str(self.port), "--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        cmd += ["--db-filename", str(self.db_file), "--log-level", "warn"]
        for key, value in self.config.items():
            cmd += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        return cmd


def psql(cluster: PostgresCluster, sql: str) -> None:
    """A statement as the cluster's initial superuser (over TCP: still trusted then)."""
    cmd = [str(cluster.bin / "psql"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U"]
    cmd += ["postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def start_like_the_image(cluster: PostgresCluster, env: dict[str, str]) -> None:
    """What the postgres image does at its first start, from the service's environment:
    POSTGRES_USER a superuser with POSTGRES_PASSWORD, a database named POSTGRES_DB (by default
    the user's name), and a password required of every connection over TCP."""
    user = env.get("POSTGRES_USER", "postgres")
    assert user != "postgres", "the rehearsal's own superuser is postgres"
    password = env["POSTGRES_PASSWORD"].replace("'", "''")
    psql(cluster, f"CREATE ROLE \"{user}\" SUPERUSER LOGIN PASSWORD '{password}'")
    psql(cluster, f'CREATE DATABASE "{env.get("POSTGRES_DB", user)}" OWNER "{user}"')
    hba = cluster.data / "pg_hba.conf"
    kept = [line for line in hba.read_text().splitlines() if not line.startswith("host")]
    tcp = ["host all all 127.0.0.1/32 scram-sha-256", "host all all ::1/128 scram-sha-256"]
    hba.write_text("\n".join(kept + tcp) + "\n")
    cluster.stop()  # started again to read it (the image's entrypoint restarts too)
    cluster.start()
