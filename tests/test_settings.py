"""Tests run on their own settings only: nothing from the developer's environment or `.env`
reaches them, in-process or in a child process."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledgeops.settings import Settings, load_settings
from tests.conftest import HermeticSettings, settings_env


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
