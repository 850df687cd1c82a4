"""The image's HEALTHCHECK (`python -m starter.healthcheck`): healthy when the process answers on
one of its endpoints (the API's /healthz, else a worker's metrics at METRICS_ADDRESS, served
as a --no-api worker serves them); else exit 1 with one line naming what it tried."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client import start_http_server

from knowledgeops.config.settings import Settings
from knowledgeops.db.database import Database
from knowledgeops.observability import metrics
from starter.dev_server import free_port
from tests.helpers.environment import HermeticSettings, settings_env, worker_serving_api


def healthcheck(tmp_path: Path, **settings: Any) -> subprocess.CompletedProcess[str]:
    env = settings_env(HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data", **settings))
    return subprocess.run(
        [sys.executable, "-m", "starter.healthcheck"],
        cwd=tmp_path,  # no .env of the developer's
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_process_serving_the_api_is_healthy(settings: Settings, tmp_path: Path) -> None:
    # As `knowledgeops db upgrade` would (a PostgreSQL database is not migrated by a process).
    await (await Database.open(settings)).close()
    async with worker_serving_api(settings, tmp_path / "worker.log"):
        up = await asyncio.to_thread(healthcheck, tmp_path, API_PORT=settings.api_port)
        assert up.returncode == 0, up.stderr


def test_a_worker_is_healthy_while_its_metrics_answer(tmp_path: Path) -> None:
    api_port, metrics_port = free_port(), free_port()
    # What a worker that serves no API starts (knowledgeops.observability.metrics.serve).
    server, _ = start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.REGISTRY)
    settings = {"API_PORT": api_port, "METRICS_ADDRESS": f"0.0.0.0:{metrics_port}"}
    try:
        up = healthcheck(tmp_path, **settings)
        assert up.returncode == 0, up.stderr
    finally:
        server.shutdown()
        server.server_close()
    down = healthcheck(tmp_path, **settings)
    assert down.returncode == 1
    [line] = down.stderr.strip().splitlines()
    assert line.startswith("unhealthy: nothing answered: ")
    assert f"http://127.0.0.1:{api_port}/healthz" in line
    assert f"http://127.0.0.1:{metrics_port}/metrics" in line


def test_a_worker_with_nothing_to_probe_is_told_what_to_set(tmp_path: Path) -> None:
    done = healthcheck(tmp_path, API_PORT=free_port())
    assert done.returncode == 1 and "METRICS_ADDRESS" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
