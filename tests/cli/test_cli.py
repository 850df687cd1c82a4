"""The `knowledgeops` command as a user runs it: real processes, real ports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from knowledgeops.config.settings import Settings
from starter.dev_server import free_port, port_in_use
from tests.helpers.environment import _OUR_VARS, EXAMPLES, ROOT, running_env, settings_env
from tests.helpers.waiting import eventually_sync

CLI = [sys.executable, "-m", "starter.cli.main"]


def cli(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


async def test_cli_exits_cleanly_every_time(settings: Settings) -> None:
    async with running_env(settings) as env:
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
        await env.service.wait(ref.task_id, timeout=60)
    environ = settings_env(settings)
    codes = []
    for _ in range(8):
        r = cli(["status", ref.task_id, "--json"], environ)
        codes.append(r.returncode)
        assert json.loads(r.stdout)["status"] == "completed", r.stderr
    assert codes == [0] * 8
    missing = cli(["status", "no-such-job"], environ)
    assert missing.returncode == 1 and "No task with id" in missing.stderr


def test_invalid_setting_stops_startup_naming_it(settings: Settings) -> None:
    environ = settings_env(settings) | {"EMBEDDING_PROVIDER": "magic", "CHUNK_TOKENS": "-5"}
    r = cli(["status", "x"], environ)
    assert r.returncode == 2
    assert "EMBEDDING_PROVIDER='magic'" in r.stderr and "CHUNK_TOKENS='-5'" in r.stderr


def _free_port_pair() -> int:
    for _ in range(50):
        p = free_port()
        if p + 1000 < 65536 and not port_in_use("127.0.0.1", p + 1000):
            return p
    raise RuntimeError("no free port pair")


def test_dev_runs_the_whole_system_and_stops_cleanly(tmp_path: Path) -> None:
    port = _free_port_pair()
    environ = {k: v for k, v in os.environ.items() if k not in _OUR_VARS}
    environ |= {
        "KNOWLEDGEOPS_DATA_DIR": str(tmp_path / "data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "API_PORT": str(free_port()),
        "EMBEDDING_PROVIDER": "local",
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / "dev.log").open("w+")
    dev = subprocess.Popen([*CLI, "dev"], cwd=ROOT, env=environ, stdout=log, stderr=log)
    try:
        _wait_for_line(Path(log.name), "knowledgeops is running", dev, 90)
        # Start-up says what runs, not how each library got there.
        assert " INFO alembic" not in Path(log.name).read_text()
        children = psutil.Process(dev.pid).children(recursive=True)
        assert any("temporal" in c.name() for c in children)
        assert any("worker" in c.cmdline() for c in children)

        # From a shell that does not have the server's data directory (another folder, as on
        # another machine): the files are uploaded through the API, nothing is stored here.
        elsewhere = environ | {"KNOWLEDGEOPS_DATA_DIR": str(tmp_path / "elsewhere")}
        files = sorted(EXAMPLES.iterdir())
        r = cli(["import", *map(str, files), "--follow", "--json"], elsewhere)
        assert r.returncode == 0, r.stderr
        statuses = json.loads(r.stdout)
        assert [s["status"] for s in statuses] == ["completed"] * len(files)
        assert not (tmp_path / "elsewhere").exists()
        assert len(list((tmp_path / "data" / "files").iterdir())) == len(files)

        r = cli(
            ["search", "How do plants fix carbon dioxide in the Calvin cycle?", "--json"], environ
        )
        assert r.returncode == 0, r.stderr
        hit = json.loads(r.stdout)[0]
        assert "RuBisCO" in hit["text"]

        # Documents through the CLI; the worker holds the embedded index, so show and delete
        # go through its API.
        listed = json.loads(cli(["documents", "list", "--json"], environ).stdout)
        assert listed["total"] == len(statuses)
        assert {d["status"] for d in listed["items"]} == {"ready"}
        r = cli(["documents", "show", hit["document_id"], "--json"], environ)
        shown = json.loads(r.stdout)
        assert shown["points_in_index"] == shown["indexed_chunks"] > 0, r.stderr
        delete = ["documents", "delete", hit["document_id"], "--reason", "test", "--follow"]
        r = cli(delete, environ)
        assert r.returncode == 0 and f"{shown['points_in_index']} points removed" in r.stdout
        r = cli(["documents", "show", hit["document_id"]], environ)
        assert r.returncode == 1 and "No document with id" in r.stderr
        listed = json.loads(cli(["documents", "list", "--json"], environ).stdout)
        assert listed["total"] == len(statuses) - 1

        with urllib.request.urlopen(f"http://127.0.0.1:{port + 1000}/", timeout=10) as ui:
            assert ui.status == 200  # the Web UI is up

        dev.send_signal(signal.SIGTERM)
        assert dev.wait(30) == 0
        # Helpers (the model process's resource tracker) exit when they see the parent gone.
        _, alive = psutil.wait_procs(children, timeout=15)
        assert not [c for c in alive if c.status() != "zombie"]
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        log.close()


@pytest.mark.parametrize("taken", ["api", "web-ui"])
def test_dev_stops_at_once_when_a_port_is_taken(tmp_path: Path, taken: str) -> None:
    """A port in use ends `dev` before it starts anything, naming the setting to change."""
    port, api_port = _free_port_pair(), free_port()
    held = port + 1000 if taken == "web-ui" else api_port
    environ = {k: v for k, v in os.environ.items() if k not in _OUR_VARS}
    environ |= {
        "KNOWLEDGEOPS_DATA_DIR": str(tmp_path / "data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "API_PORT": str(api_port),
    }
    with socket.create_server(("127.0.0.1", held)):
        r = cli(["dev"], environ, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"port {held} on 127.0.0.1 is already in use" in r.stderr
    assert ("API_PORT" if taken == "api" else "the Web UI is on its port + 1000") in r.stderr
    assert not (tmp_path / "data" / "logs" / "temporal.log").exists()  # nothing was started


async def test_worker_stops_with_a_message_when_its_api_port_is_taken(settings: Settings) -> None:
    with socket.create_server(("127.0.0.1", settings.api_port)):
        r = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "worker"],
            cwd=ROOT,
            env=settings_env(settings),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"the API cannot listen on 127.0.0.1:{settings.api_port}" in r.stderr
    assert "set API_PORT" in r.stderr


@pytest.mark.parametrize("command", ["status", "cancel"])
def test_cli_reports_unreachable_server(command: str, tmp_path: Path) -> None:
    environ = {**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    environ["KNOWLEDGEOPS_DATA_DIR"] = str(tmp_path)
    r = cli([command, "some-job"], environ, timeout=60)
    assert r.returncode == 1
    assert "Cannot reach Temporal" in r.stderr and "knowledgeops dev" in r.stderr


async def test_run_starts_any_type_and_refuses_bad_payloads(settings: Settings) -> None:
    environ = settings_env(settings)
    r = cli(["run", "OCR_PROCESS", "--payload", '{"file_id": "x"}'], environ)
    assert r.returncode == 1 and "Invalid OCR_PROCESS payload: file_id" in r.stderr
    r = cli(["run", "DOCUMENT_IMPORT", "--payload", '{"file_id": "nope"}'], environ)
    assert r.returncode == 1 and "Invalid DOCUMENT_IMPORT payload" in r.stderr
    assert "document_id: Field required" in r.stderr
    r = cli(["run", "DOCUMENT_IMPORT", "--payload", "{not json"], environ)
    assert r.returncode == 1 and "--payload is not valid JSON" in r.stderr

    async with running_env(settings) as env:
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
        await env.service.wait(ref.task_id, timeout=60)
        raw, _ = await env.service.task_input(ref.task_id)
        payload = settings.data_dir / "payload.json"
        payload.write_text(json.dumps(raw | {"document_id": "via-run"}))
        # In a thread: this test's event loop runs the worker the command waits for.
        args = ["run", "DOCUMENT_IMPORT", "--payload", f"@{payload}", "--follow", "--json"]
        r = await asyncio.to_thread(cli, args, environ)
        assert r.returncode == 0, r.stderr
        [status] = json.loads(r.stdout)
        assert status["status"] == "completed" and status["progress"]["unit"] == "chunks"
        assert status["progress"]["done"] == status["progress"]["total"] > 0
        assert await env.points("via-run") == status["result"]["total_chunks"]


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    def read() -> str:
        assert proc.poll() is None, log.read_text()[-3000:]
        return log.read_text()

    eventually_sync(read, lambda seen: text in seen, timeout=seconds, interval=0.3, what=text)


def test_dev_restarts_a_killed_temporal_server(tmp_path: Path) -> None:
    port = _free_port_pair()
    environ = {k: v for k, v in os.environ.items() if k not in _OUR_VARS}
    environ |= {
        "KNOWLEDGEOPS_DATA_DIR": str(tmp_path / "data"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "API_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path / "dev.log"
    with log_path.open("w") as log:
        dev = subprocess.Popen([*CLI, "dev"], cwd=ROOT, env=environ, stdout=log, stderr=log)
    try:
        _wait_for_line(log_path, "knowledgeops is running", dev, 90)
        r = cli(["import", str(EXAMPLES / "spaced-repetition.txt"), "--follow", "--json"], environ)
        assert r.returncode == 0, r.stderr
        [before] = json.loads(r.stdout)
        [server] = [c for c in psutil.Process(dev.pid).children() if "temporal" in c.name()]
        server.kill()  # SIGKILL: no chance to clean up
        _wait_for_line(log_path, "Temporal dev server back on", dev, 60)
        assert "restarting it" in log_path.read_text()
        # Everything it knew is still there, and the worker carries on with new work.
        r = cli(["status", before["task_id"], "--json"], environ)
        assert r.returncode == 0 and json.loads(r.stdout)["status"] == "completed", r.stderr
        r = cli(["import", str(EXAMPLES / "temporal-retries.md"), "--follow", "--json"], environ)
        assert r.returncode == 0, r.stderr + log_path.read_text()[-3000:]
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(30) == 0
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
