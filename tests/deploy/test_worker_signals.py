"""`knowledgeops worker` is a launcher whose worker process is its child (starter/processes.py
run_worker). In a container the launcher is PID 1 and the only process `docker stop` signals:
its SIGTERM has to reach the worker, which drains (stops polling, gives running activities
WORKER_SHUTDOWN_GRACE_SECONDS: tests/ingest/test_crash_resume.py), and the launcher has to
exit with the worker's status, leaving no process behind. Both as PID 1 of a PID namespace of
its own (a container without an init) and as an ordinary process (under `init: true`'s tini,
systemd or a shell). The compose file's worker healthcheck runs as written against the
worker's metrics port."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import Pool
from starter.dev_server import free_port
from starter.processes import WORKER_STOP_MARGIN
from tests.helpers.environment import ROOT, settings_env
from tests.helpers.waiting import eventually_sync

GRACE_SECONDS = 2.0
LAUNCHER = [sys.executable, "-m", "starter.cli.main", "worker", "--no-api", "--pool", "parse"]
# A PID namespace with its own /proc, as a container has: the launcher is PID 1 in it.
AS_PID_1 = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _pid_namespaces_available() -> bool:
    # Needs util-linux's unshare and CAP_SYS_ADMIN (root here and in CI); without them only
    # the plain case runs.
    try:
        done = subprocess.run([*AS_PID_1, "true"], capture_output=True, timeout=10)
    except FileNotFoundError:
        return False
    return done.returncode == 0


def worker_healthcheck(port: int) -> list[str]:
    """The compose file's worker healthcheck, its metrics port moved to `port`."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    tests = {tuple(services[f"worker-{pool.value}"]["healthcheck"]["test"]) for pool in Pool}
    assert len(tests) == 1, "the worker services check their health differently"
    kind, program, *args = tests.pop()
    assert kind == "CMD" and program == "python", "run with the image's python, no shell"
    assert any("http://127.0.0.1:9464/metrics" in a for a in args)
    return [sys.executable, *(a.replace(":9464/", f":{port}/") for a in args)]


@pytest.mark.parametrize(
    "pid_1",
    [
        pytest.param(
            True,
            id="pid-1",
            marks=pytest.mark.skipif(
                not _pid_namespaces_available(), reason="no PID namespaces here (unshare)"
            ),
        ),
        pytest.param(False, id="plain"),
    ],
)
def test_sigterm_to_the_launcher_drains_its_worker_and_leaves_no_process(
    settings: Settings, tmp_path: Path, pid_1: bool
) -> None:
    port = free_port()
    cfg = settings.model_copy(
        update={
            "metrics_address": f"127.0.0.1:{port}",
            "worker_shutdown_grace_seconds": GRACE_SECONDS,
        }
    )
    check = worker_healthcheck(port)
    log = tmp_path / "worker.log"
    tree: list[psutil.Process] = []
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*(AS_PID_1 if pid_1 else []), *LAUNCHER],
            cwd=ROOT,
            env=settings_env(cfg),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        launcher = psutil.Process(proc.pid)
        if pid_1:
            # unshare forks the namespace's PID 1 and only waits for it.
            [launcher] = eventually_sync(
                lambda: psutil.Process(proc.pid).children(), bool, what="the PID 1 launcher"
            )

        def healthy() -> int:
            return subprocess.run(check, capture_output=True, timeout=10).returncode

        # The healthcheck fails until the worker serves its metrics, then passes.
        assert healthy() != 0
        eventually_sync(healthy, lambda rc: rc == 0, timeout=60, what="the worker healthcheck")
        assert "worker ready" in log.read_text()
        tree = launcher.children(recursive=True)
        assert any("worker" in p.cmdline() for p in tree), [p.cmdline() for p in tree]

        started = time.monotonic()
        launcher.send_signal(signal.SIGTERM)  # to the launcher only, as `docker stop` does
        code = proc.wait(timeout=GRACE_SECONDS + WORKER_STOP_MARGIN + 10)
        elapsed = time.monotonic() - started
        text = log.read_text()
        assert code == 0, text
        assert elapsed < GRACE_SECONDS + WORKER_STOP_MARGIN, text
        assert "SIGTERM: stopping the worker process" in text
        _, alive = psutil.wait_procs(tree, timeout=5)
        left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], [p.cmdline() for p in left]
    finally:
        for p in [launcher, *tree] if tree else []:
            # What this test started must not outlive it (after a pass all is gone already).
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Worker processes that stop on SIGINT, or that ignore SIGTERM, for the launcher's own rules.
GENTLE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *_: sys.exit(0))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)"
)
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)"
)


def _launcher_of(child: str, grace: float) -> subprocess.Popen[str]:
    """starter/processes.py's launcher in a process of its own, running `child` (Python)."""
    launch = (
        "import os, sys\n"
        "from starter.processes import run_forwarding_signals\n"
        f"sys.exit(run_forwarding_signals([sys.executable, '-c', {child!r}], dict(os.environ), "
        f"{grace}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launch],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_ctrl_c_stops_the_worker_and_the_launcher_exits_130() -> None:
    proc = _launcher_of(GENTLE, grace=20)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "SIGINT: stopping the worker process" in err


def test_a_worker_still_running_after_the_grace_period_is_killed() -> None:
    proc = _launcher_of(STUBBORN, grace=1)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert 1 <= time.monotonic() - started < 10
    assert "did not stop within 1 s of SIGTERM; killing it" in err
