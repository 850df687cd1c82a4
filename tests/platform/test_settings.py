"""Tests run on their own settings only: nothing from the developer's environment or `.env`
reaches them, in-process or in a child process. An invalid setting stops every process at
start with one line naming it (exit 2), never a traceback or a secret."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError
from tests.helpers.environment import ROOT, HermeticSettings, settings_env


def test_test_settings_ignore_the_environment_and_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "WEBHOOK_URLS=http://from-dotenv.invalid/hook\nWEBHOOK_SECRET=a-dotenv-secret-of-24-bytes\n"
    )
    monkeypatch.setenv("QDRANT_URL", "http://from-env.invalid:6333")
    monkeypatch.setenv("EMBEDDING_PROVIDER", "openai")
    # The product does read both (that is how a deployment is configured) ...
    product = load_settings()
    assert product.qdrant_url and product.webhook_urls and product.embedding_provider == "openai"
    # ... a test does not.
    s = HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")
    assert (s.qdrant_url, s.webhook_urls, s.embedding_provider) == ("", "", "local")
    # A child process started with settings_env() loads exactly the test's settings.
    child_env = settings_env(s)
    assert child_env["QDRANT_URL"] == "" and child_env["EMBEDDING_PROVIDER"] == "local"
    assert set(child_env) >= {f.alias for f in Settings.model_fields.values() if f.alias}


def test_env_example_documents_every_setting_and_only_those() -> None:
    """.env.example is where an operator finds what can be set: a new setting must be added
    there (with its default), and a removed one taken out."""
    text = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    documented = dict(
        line.removeprefix("# ").split("=", 1)
        for line in text.splitlines()
        if re.fullmatch(r"(# )?[A-Z][A-Z0-9_]*=.*", line)
    )
    fields = {f.alias: f for f in Settings.model_fields.values() if f.alias}
    assert sorted(set(fields) - set(documented)) == [], "settings missing from .env.example"
    assert sorted(set(documented) - set(fields)) == [], ".env.example names unknown settings"
    for alias, value in documented.items():
        field = fields[alias]
        if field.default_factory is None:
            # The value shown is the default, as the setting reads it.
            assert Settings(**{alias: value}).model_dump()[_name(alias)] == field.default, alias


def test_configuration_page_names_every_setting() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", page))
    aliases = {f.alias for f in Settings.model_fields.values() if f.alias}
    assert sorted(aliases - named) == [], "settings missing from docs/configuration.md"


def _name(alias: str) -> str:
    return next(n for n, f in Settings.model_fields.items() if f.alias == alias)


# A bad setting, the setting the message must name, and text it must never show.
_BAD_SETTINGS = [
    ({"STORAGE_URL": "s3://kb/x"}, "STORAGE_URL", None),
    ({"DATABASE_URL": "nonsense://user:pw-db-secret@x/db"}, "DATABASE_URL", "pw-db-secret"),
    (
        {"STORAGE_URL": "s3://bucket-ok/x", "AWS_ENDPOINT_URL": "not-a-url"},
        "AWS_ENDPOINT_URL",
        None,
    ),
    ({"BACKUP_URL": "ftp://user:pw-backup-secret@x"}, "BACKUP_URL", "pw-backup-secret"),
    ({"BACKUP_URL": "file://user:pw-file-secret@host/x"}, "BACKUP_URL", "pw-file-secret"),
    (
        {"BACKUP_URL": "s3://bucket-ok/x", "AWS_ACCESS_KEY_ID": "someone"},
        "AWS_SECRET_ACCESS_KEY",
        None,
    ),
]


def _start(
    args: list[str], tmp_path: Path, bad: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    # No Temporal at that address: a process that got past its settings would fail otherwise.
    good = HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data", TEMPORAL_ADDRESS="127.0.0.1:1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,  # no .env
        env=settings_env(good) | bad,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_one_line_naming(r: subprocess.CompletedProcess[str], setting: str) -> None:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"error: invalid setting {setting}"), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "starter.cli.main", "worker"],
        ["-m", "starter.cli.main", "api"],
        ["-m", "starter.cli.main", "dev"],
        ["-m", "starter.cli.main", "server"],
        ["-m", "starter.cli.main", "status", "x"],
        [str(ROOT / "worker.py")],
    ],
    ids=lambda args: " ".join(args[2:]) or "worker.py",
)
def test_a_bad_setting_stops_every_process_with_one_line(args: list[str], tmp_path: Path) -> None:
    _assert_one_line_naming(_start(args, tmp_path, {"STORAGE_URL": "s3://kb/x"}), "STORAGE_URL")


@pytest.mark.parametrize(("bad", "setting", "secret"), _BAD_SETTINGS, ids=lambda v: str(v))
def test_bad_urls_are_settings_errors_never_showing_secrets(
    bad: dict[str, str], setting: str, secret: str | None, tmp_path: Path
) -> None:
    r = _start(["-m", "starter.cli.main", "status", "x"], tmp_path, bad)
    _assert_one_line_naming(r, setting)
    assert secret is None or secret not in r.stderr, r.stderr


def test_usable_urls_pass_and_s3_settings_are_checked_only_for_s3() -> None:
    HermeticSettings(
        DATABASE_URL="postgresql+asyncpg://user:pw@db.example:5432/kb",
        STORAGE_URL="s3://bucket-ok/some/prefix",
        BACKUP_URL="file:///mnt/backups",
        AWS_ENDPOINT_URL="http://minio:9000",
        AWS_ACCESS_KEY_ID="someone",
        AWS_SECRET_ACCESS_KEY="a-secret",
    )
    HermeticSettings(DATABASE_URL="sqlite+aiosqlite:////tmp/app.db")
    # AWS_* set for other tools while nothing is stored on S3: not this program's to judge.
    HermeticSettings(AWS_ENDPOINT_URL="not-a-url", AWS_ACCESS_KEY_ID="someone")
    with pytest.raises(ValidationError, match="asyncio driver"):
        HermeticSettings(DATABASE_URL="postgresql+psycopg2://user:pw@db.example/kb")


def test_several_bad_settings_give_a_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMBEDDING_PROVIDER", "magic")
    monkeypatch.setenv("STORAGE_URL", "file://user:pw-in-url@host/x")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    lines = str(caught.value).splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "invalid setting EMBEDDING_PROVIDER",
        "invalid setting STORAGE_URL",
    ]
    assert "pw-in-url" not in str(caught.value)
