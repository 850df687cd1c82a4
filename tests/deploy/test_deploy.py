"""The compose stack and the image, checked as far as a machine with no Docker engine can:
every service the application needs, versions pinned, nothing published beyond loopback, no
password in the files, every variable documented, every application setting a real one, the
search attributes registered, a non-root image with its dependencies in their own layer,
installed from requirements.lock (every runtime dependency pinned, each file's hash checked);
and `docker-compose config` when the tool is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from knowledgeops.config.settings import Settings
from knowledgeops.registry.task_types import SEARCH_ATTRIBUTES, Pool

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / "deploy" / "compose.env.example"


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_the_stack_has_every_service_pinned_and_on_loopback() -> None:
    services = _compose()["services"]
    assert set(services) >= {
        "postgresql",
        "app-db",
        "temporal-schema",
        "temporal",
        "temporal-setup",
        "temporal-ui",
        "qdrant",
        "s3",
        "s3-setup",
        "api",
        *(f"worker-{pool.value}" for pool in Pool),
    }
    for name, service in services.items():
        image = service.get("image", "")
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert tag and tag != "latest", f"{name}: image {image!r} is not pinned"
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    assert "auto-setup" not in COMPOSE.read_text()  # the deprecated all-in-one image


def test_no_password_is_written_down_and_every_variable_is_documented() -> None:
    text = COMPOSE.read_text()
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))
    assert sorted(used - documented) == [], "variables not in deploy/compose.env.example"
    for secret in (
        "POSTGRES_PASSWORD",
        "APP_DB_PASSWORD",
        "QDRANT_API_KEY",
        "API_TOKENS",
        "S3_SECRET_KEY",
    ):
        assert re.search(rf"^{secret}=$", ENV_EXAMPLE.read_text(), re.M), f"{secret} has a value"
        assert f"${{{secret}:?" in text, f"{secret} is not required by the stack"
    assert not re.search(r"(PASSWORD|PWD|API_KEY): [^$\s]", text), "a literal secret"


def test_the_applications_environment_names_real_settings() -> None:
    services = _compose()["services"]
    aliases = {f.alias for f in Settings.model_fields.values() if f.alias}
    for name in ("api", *(f"worker-{pool.value}" for pool in Pool)):
        unknown = set(services[name]["environment"]) - aliases
        assert unknown == set(), f"{name} sets what no setting reads: {unknown}"
        assert services[name]["environment"]["QDRANT_URL"]  # a server, not the embedded index


def test_the_setup_job_registers_every_search_attribute() -> None:
    script = (ROOT / "deploy" / "temporal" / "setup-namespace.sh").read_text()
    for key in SEARCH_ATTRIBUTES:
        assert re.search(rf"for name in [^;]*\b{key.name}\b", script), key.name


def test_the_image_is_non_root_with_dependencies_in_their_own_layer() -> None:
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip()]
    text = "\n".join(lines)
    assert re.search(r"^USER (?!root)\w+", text, re.M)
    deps = next(i for i, line in enumerate(lines) if "-r requirements.lock" in line)
    code = next(i for i, line in enumerate(lines) if line.startswith("COPY knowledgeops"))
    assert deps < code, "dependencies must be installed before the code is copied"
    for pool in Pool:
        command = _compose()["services"][f"worker-{pool.value}"]["command"]
        assert "pip install" not in " ".join(command)
        assert command[-2:] == ["--pool", pool.value]


def test_the_image_installs_the_lock_with_its_hashes_checked() -> None:
    runs = " ".join((ROOT / "Dockerfile").read_text().replace("\\\n", " ").split())
    assert "pip install --require-hashes --no-deps -r requirements.lock" in runs
    assert "pip install --no-deps ." in runs  # the application itself: nothing unlocked


def _locked() -> dict[str, tuple[Version, list[str]]]:
    """requirements.lock: name -> (pinned version, hashes)."""
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    entries = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    found: dict[str, tuple[Version, list[str]]] = {}
    for entry in entries.replace("\\\n", " ").splitlines():
        if entry.strip():
            spec, *hashes = entry.split(" --hash=")
            req = Requirement(spec)
            [pin] = req.specifier
            assert pin.operator == "==", f"{entry.strip()[:60]}: not an exact pin"
            found[canonicalize_name(req.name)] = (Version(pin.version), [h.strip() for h in hashes])
    return found


def test_the_lock_pins_every_runtime_dependency_with_hashes() -> None:
    # Regenerate with deploy/lock-requirements.sh after changing pyproject's dependencies.
    locked = _locked()
    for name, (_, hashes) in locked.items():
        assert hashes, f"{name} has no hash in requirements.lock"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    for req in list(wanted):
        # An extra's requirements (sqlalchemy[asyncio] -> greenlet), as the installed package
        # declares them.
        for extra in req.extras:
            for declared in map(Requirement, metadata.requires(req.name) or []):
                if declared.marker and declared.marker.evaluate({"extra": extra}):
                    wanted.append(declared)
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} is not in requirements.lock: deploy/lock-requirements.sh"
        assert req.specifier.contains(locked[name][0], prereleases=True), (
            f"requirements.lock pins {name}=={locked[name][0]}, outside {req}: "
            "deploy/lock-requirements.sh"
        )


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_config_accepts_the_stack(tmp_path: Path) -> None:
    for name in ("docker-compose.yml", "Dockerfile"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    env = ENV_EXAMPLE.read_text()
    for secret in ("POSTGRES_PASSWORD", "APP_DB_PASSWORD", "QDRANT_API_KEY", "S3_SECRET_KEY"):
        env = env.replace(f"{secret}=\n", f"{secret}=a-test-secret\n")
    env = env.replace("API_TOKENS=\n", "API_TOKENS=a-test-token-0123456789:ops\n")
    (tmp_path / ".env").write_text(env)
    ok = subprocess.run(["docker-compose", "config"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (tmp_path / ".env").write_text(ENV_EXAMPLE.read_text())  # the secrets left empty
    refused = subprocess.run(
        ["docker-compose", "config"], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "set POSTGRES_PASSWORD in .env" in refused.stderr


def test_every_test_file_ci_names_exists() -> None:
    # .ci/run names the PostgreSQL pass's files one by one: a moved or split file would stop
    # that pass with "file not found" only in CI.
    named = re.findall(r"tests/[\w/]+\.py", (ROOT / ".ci" / "run").read_text())
    assert named, "the PostgreSQL pass names no test file"
    assert [n for n in named if not (ROOT / n).is_file()] == []
