"""A PostgreSQL cluster of a test's own (Debian's server binaries), which the test may stop and
start again: an outage of the database without disturbing the server other tests share."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starter.dev_server import free_port


def postgres_bin() -> Path | None:
    """The newest installed server's bin folder (initdb, pg_ctl), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


class PostgresCluster:
    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.data = root / "pgdata"
        self.bin = bin_dir
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        self._log = root / "postgres.log"

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if os.geteuid() == 0:  # the server refuses to run as root: as the postgres user
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, cwd="/", text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")

    def init(self) -> None:
        self.data.mkdir(parents=True)
        self._log.touch()
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres")
            shutil.chown(self._log, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._run(
            "pg_ctl", "-D", str(self.data), "-w", "-l", str(self._log), "-o", options, "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@contextmanager
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A fresh cluster, running, stopped and removed at the end whatever happens. Its folder
    is not under pytest's (private to root): the postgres user must reach it."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server here: apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="ko-pg-"))
    root.chmod(0o755)
    cluster = PostgresCluster(root, bin_dir)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
