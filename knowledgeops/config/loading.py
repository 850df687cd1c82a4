"""Reading `Settings` from the environment and `.env`: one error that names every invalid
setting and what is wrong with it, never echoing a secret's value."""

from __future__ import annotations

from pydantic import ValidationError

from knowledgeops.config.settings import Settings
from knowledgeops.config.values import SettingsError

# Settings whose values are never echoed in an error (tokens, keys, URLs with passwords).
_SECRET_SETTINGS = frozenset(
    {
        "API_TOKENS",
        "API_TOKEN",
        "ADMIN_TOKENS",
        "WEBHOOK_SECRET",
        "WEBHOOK_URLS",
        "OPENAI_API_KEY",
        "QDRANT_API_KEY",
        "RERANK_API_KEY",
        "DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "BACKUP_URL",
    }
)


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as e:
        lines = []
        for err in e.errors():
            name = ".".join(str(p) for p in err["loc"]) or "settings"
            shown = "'***'" if name.upper() in _SECRET_SETTINGS else repr(err.get("input"))
            lines.append(f"  {name}={shown}: {err['msg']}")
        raise SettingsError(
            "Invalid setting(s); fix the environment or .env and start again:\n" + "\n".join(lines)
        ) from None
