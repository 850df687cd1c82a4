"""Tests run on their own settings only: nothing from the developer's environment or `.env`
reaches them, in-process or in a child process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from knowledgeops.config.loading import load_settings
from knowledgeops.config.settings import Settings
from tests.helpers.environment import HermeticSettings, settings_env


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
