"""Reading `Settings` from the environment and `.env`: one error that names every invalid
setting and what is wrong with it, never echoing a secret's value or a URL's password."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_core import ErrorDetails

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
    """The settings, or SettingsError: one line per invalid setting, naming it and saying
    what is wrong (what a process prints, after `error: `, when it cannot start)."""
    try:
        return Settings()
    except ValidationError as e:
        lines = [_line(_alias(err["loc"]), err) for err in e.errors()]
        raise SettingsError("\n".join(lines)) from None


def _alias(loc: tuple[int | str, ...]) -> str:
    # A default that fails its check (validate_default) is reported by field name.
    name = ".".join(str(p) for p in loc)
    field = Settings.model_fields.get(name)
    return field.alias if field is not None and field.alias else name


def _line(name: str, err: ErrorDetails) -> str:
    value = err.get("input")
    message = err["msg"].removeprefix("Value error, ")
    if name.upper() in _SECRET_SETTINGS:
        shown = "'***'"
        if isinstance(value, str) and value.strip():
            # A check's message may quote the value (the storage URL checks do).
            for quoted in {repr(value), repr(value.strip())}:
                message = message.replace(quoted, shown)
    else:
        shown = repr(_without_password(value))
    # A message that already starts with the setting (a storage URL check's) says it itself.
    said = message.startswith(name) or not name
    return f"invalid setting {message if said else f'{name}={shown}: {message}'}"


def _without_password(value: object) -> object:
    """A URL with its user:password part masked, as a message may show it."""
    if not isinstance(value, str) or "@" not in value:
        return value
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if "@" not in parts.netloc:
        return value
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
