"""Rehearsing docker-compose.yml on a machine with no Docker engine
(tests/deploy/test_compose_rehearsal.py): the stack as `docker-compose config` resolves it, what
each service becomes here (SERVICE_ROLES, the drift guard), the order its depends_on starts
them in, and the command line and environment a service gets on this machine: compose's host
names pointed at loopback stand-ins, its volumes at folders of its own host, `knowledgeops` the
venv's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from starter.dev_server import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ENV_EXAMPLE = ROOT / "deploy" / "compose.env.example"
# The temporalio/server image's working directory (DYNAMIC_CONFIG_FILE_PATH is relative to it).
TEMPORAL_IMAGE_WORKDIR = "/etc/temporal"


class Kind(Enum):
    """How the rehearsal brings a service up."""

    OWN_CLUSTER = "PostgreSQL: a cluster of the test's own"
    COMMAND = "its entrypoint + command, run here as compose says"
    DEV_SCHEMA = "Temporal's schema: the dev server makes its own"
    DEV_SERVER = "Temporal: the dev server"
    DEV_UI = "the Web UI: the dev server's own"
    EMBEDDED_INDEX = "Qdrant: the embedded index in the folded process"
    RCLONE = "MinIO: rclone serve s3"
    BUCKET_FOLDERS = "mc mb: the buckets as folders of rclone's root"
    FOLDED = "the API and the index pools' workers: one process"


# Every service of docker-compose.yml and how it is rehearsed. A service added to the stack
# fails the rehearsal until it is given a role here: nothing goes unrehearsed silently.
SERVICE_ROLES: dict[str, Kind] = {
    "postgresql": Kind.OWN_CLUSTER,
    "app-db": Kind.COMMAND,
    "temporal-schema": Kind.DEV_SCHEMA,
    "temporal": Kind.DEV_SERVER,
    "temporal-setup": Kind.COMMAND,
    "temporal-ui": Kind.DEV_UI,
    "qdrant": Kind.EMBEDDED_INDEX,
    "s3": Kind.RCLONE,
    "s3-setup": Kind.BUCKET_FOLDERS,
    "migrate": Kind.COMMAND,
    "api": Kind.FOLDED,
    "worker-parse": Kind.COMMAND,
    "worker-ingest": Kind.FOLDED,
    "worker-ai": Kind.FOLDED,
    "worker-maintenance": Kind.FOLDED,
}
# Settings that only point at the Qdrant server the rehearsal replaces by the embedded index.
QDRANT_SETTINGS = ("QDRANT_URL", "QDRANT_API_KEY")
# Where a service listens inside its container: on this machine, loopback and a free port.
LISTEN_SETTINGS = ("API_HOST", "API_PORT", "METRICS_ADDRESS")


def compose_config(work: Path, values: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The stack's services as `docker-compose config` resolves them with a .env of `values`
    (deploy/compose.env.example with these filled in), in a copy of the files it reads, as
    tests/deploy/test_deploy.py runs it. Nothing of the developer's environment reaches it."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("docker-compose.yml", "Dockerfile"):
        shutil.copy(ROOT / name, work / name)
    shutil.copytree(ROOT / "deploy", work / "deploy")
    env = ENV_EXAMPLE.read_text()
    for key, value in values.items():
        env, n = re.subn(rf"^{key}=.*$", f"{key}={value}", env, flags=re.M)
        assert n == 1, f"{key} is not in deploy/compose.env.example"
    (work / ".env").write_text(env)
    done = subprocess.run(
        ["docker-compose", "config"],
        cwd=work,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    services: dict[str, dict[str, Any]] = yaml.safe_load(done.stdout)["services"]
    return services


def check_roles(services: dict[str, Any]) -> None:
    """The drift guard: every service has a role, and every role a service."""
    unknown = sorted(set(services) - set(SERVICE_ROLES))
    assert not unknown, (
        f"docker-compose.yml has services the rehearsal does not know: {unknown}; give each a "
        "role in tests/helpers/compose_rehearsal.py SERVICE_ROLES (how it is rehearsed here)"
    )
    gone = sorted(set(SERVICE_ROLES) - set(services))
    assert not gone, f"SERVICE_ROLES names services docker-compose.yml no longer has: {gone}"


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """The services this one waits for, and the condition (short form: service_started)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def start_waves(services: dict[str, Any]) -> list[list[str]]:
    """The services as `docker compose up` starts them: each once everything it depends on is
    up (a service) or done (a one-shot job), those free to start at the same time together."""
    waiting = {name: set(depends_on(s)) for name, s in services.items()}
    waves: list[list[str]] = []
    done: set[str] = set()
    while waiting:
        wave = sorted(name for name, deps in waiting.items() if deps <= done)
        assert wave, f"depends_on has a cycle among {sorted(waiting)}"
        waves.append(wave)
        done |= set(wave)
        for name in wave:
            del waiting[name]
    return waves


def one_shot(service: dict[str, Any]) -> bool:
    """A job that runs to completion (no restart policy), not a long-running service."""
    return str(service.get("restart", "no")) == "no"


def duration(value: str) -> float:
    """A compose duration ("60s", "1m30s", "500ms") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"not a duration: {value!r}"
    return sum(float(n) * units[u] for n, u in parts)


def unescaped(value: object) -> str:
    """A value as the container sees it: `config` writes a literal $ as $$."""
    return str(value).replace("$$", "$")


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each volume: a host path for a bind mount, else a volume's name."""
    found = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            found.append((str(volume["source"]), str(volume["target"])))
        else:
            source, target = str(volume).split(":")[:2]
            found.append((source, target))
    return found


def host_path(service: dict[str, Any], path: str, host: Path) -> str:
    """A path inside the service's container, on this machine: through its bind mounts to the
    (copied) repository's files, through a named volume to that volume's folder on `host`."""
    for source, target in _mounts(service):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            rest = path[len(target) :].lstrip("/")
            if source.startswith("/"):
                base = Path(source)
            else:
                base = host / "volumes" / source
                base.mkdir(parents=True, exist_ok=True)  # docker makes a new volume empty
            return str(base / rest) if rest else str(base)
    return path


def argv(service: dict[str, Any], host: Path) -> list[str]:
    """The service's entrypoint + command as a command line here: container paths mapped,
    `knowledgeops` the venv's (the image's console script)."""
    words = [
        unescaped(w) for w in [*(service.get("entrypoint") or []), *(service.get("command") or [])]
    ]
    if words and words[0] == "knowledgeops":
        words[0] = str(VENV_BIN / "knowledgeops")
    return [host_path(service, w, host) if w.startswith("/") else w for w in words]


def mapped_env(service: dict[str, Any], addresses: dict[str, str], host: Path) -> dict[str, str]:
    """The service's environment on `host`: `name:port` of a compose service (a URL's host, an
    address) and a bare host name (libpq's PGHOST, with its PGPORT) pointed at that service's
    stand-in (`addresses`: compose service -> 127.0.0.1:port); container paths mapped; the
    Qdrant server's settings dropped (the embedded index stands in for it)."""
    env = {k: unescaped(v) for k, v in (service.get("environment") or {}).items()}
    for key in QDRANT_SETTINGS:
        env.pop(key, None)
    names = "|".join(re.escape(n) for n in addresses)
    host_port = re.compile(rf"(^|[/@])({names}):\d+")
    out: dict[str, str] = {}
    for key, value in env.items():
        if value in addresses:
            loopback, port = addresses[value].rsplit(":", 1)
            assert key == "PGHOST", f"{key}={value}: a bare host name, but to which port?"
            out |= {key: loopback, "PGPORT": port}
            continue
        value = host_port.sub(lambda m: m[1] + addresses[m[2]], value)
        out[key] = host_path(service, value, host) if value.startswith("/") else value
    # (A host, not a scheme: s3://bucket is no host.)
    left = {k: v for k, v in out.items() if re.search(rf"(^|//|@)({names})(:\d|/|$)", v)}
    assert not left, f"compose host names left unmapped: {left}"
    return out


def folded_env(
    services: dict[str, Any], names: list[str], addresses: dict[str, str], host: Path
) -> dict[str, str]:
    """One environment for the services folded into one process: each one's, merged. Two
    that disagree on a setting fail the rehearsal (the folded process could not be both),
    except where each listens, which is this machine's to pick."""
    merged: dict[str, str] = {}
    for name in names:
        for key, value in mapped_env(services[name], addresses, host).items():
            if key in LISTEN_SETTINGS:
                continue
            assert merged.setdefault(key, value) == value, (
                f"{name} sets {key}={value!r}, another folded service {merged[key]!r}"
            )
    return merged


def listen_here(env: dict[str, str]) -> dict[int, int]:
    """Where the service listens in its container (API_HOST / API_PORT, METRICS_ADDRESS), in
    `env`, pointed at loopback and a free port here; container port -> this host's."""
    ports: dict[int, int] = {}
    if "API_PORT" in env:
        ports[int(env["API_PORT"])] = port = free_port()
        env |= {"API_HOST": "127.0.0.1", "API_PORT": str(port)}
    if "METRICS_ADDRESS" in env:
        ports[int(env["METRICS_ADDRESS"].rsplit(":", 1)[1])] = port = free_port()
        env["METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    return ports


def healthcheck(service: dict[str, Any], ports: dict[int, int]) -> list[str] | None:
    """The service's compose healthcheck as a command line here: its CMD with `python` the
    venv's and the container's ports on loopback the ones it listens on here (`ports`)."""
    test = [unescaped(w) for w in (service.get("healthcheck") or {}).get("test") or []]
    if not test:
        return None
    assert test[0] == "CMD", f"a healthcheck the rehearsal cannot run here: {test}"
    words = test[1:]
    if words[0] == "python":
        words[0] = str(VENV_BIN / "python")
    for inside, here in ports.items():
        words = [
            re.sub(rf"(127\.0\.0\.1|localhost):{inside}\b", f"127.0.0.1:{here}", w) for w in words
        ]
    return words


def pools(command: list[str]) -> list[str]:
    """The --pool values of a worker's command line."""
    return [command[i + 1] for i, word in enumerate(command[:-1]) if word == "--pool"]


@dataclass(frozen=True)
class Row:
    service: str
    how: str


def table(rows: list[Row]) -> str:
    """service -> how it was rehearsed, as a fixed-width table for the log."""
    width = max(len(r.service) for r in rows)
    lines = [f"{'service'.ljust(width)} | how it was rehearsed", f"{'-' * width}-+-{'-' * 60}"]
    lines += [f"{r.service.ljust(width)} | {r.how}" for r in rows]
    return "\n".join(lines)
