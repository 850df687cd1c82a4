"""The settings naming where data lives (DATABASE_URL, STORAGE_URL, BACKUP_URL and the S3
settings), checked when the settings are read, without connecting: a bad one stops a process
before it starts anything, with one line naming it, rather than failing later in a log.

Each check raises ValueError: pydantic turns only that (not, say, the storage layer's
StorageConfigError) into the validation error load_settings reports; anything else escapes
it as a traceback. No message holds a database URL or credentials: they may hold passwords."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from knowledgeops.config.values import http_url

DATABASE_URL_FORMS = (
    "give DATABASE_URL as postgresql+asyncpg://user:password@host/database or "
    "sqlite+aiosqlite:///absolute/file.db, or leave it empty for SQLite in the data directory"
)
# What the database layer supports: the backups (knowledgeops/backup/database_dump.py) and the
# asyncio engine (knowledgeops/db/database.py).
_DATABASES = ("sqlite", "postgresql")


def check_url_setting(setting: str, value: str, earlier: Mapping[str, Any]) -> str:
    """`value` of `setting` (an alias) if usable; `earlier`: the settings read before it."""
    if setting == "DATABASE_URL":
        return check_database_url(value)
    if setting in ("STORAGE_URL", "BACKUP_URL"):
        return check_storage_url(value, setting)
    if not _uses_s3(earlier):
        # The S3 settings are only read by an S3 store; AWS_* set for other tools is no error.
        return value
    if setting == "AWS_ENDPOINT_URL":
        return check_s3_endpoint(value)
    if setting == "AWS_SECRET_ACCESS_KEY" and bool(value) != bool(earlier.get("aws_access_key_id")):
        given, missing = (
            ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID")
            if value
            else ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        )
        raise ValueError(f"{given} is set but {missing} is not: set both or neither")
    return value


def check_database_url(url: str) -> str:
    """Empty, or a SQLite / PostgreSQL URL whose asyncio driver is installed."""
    if not url:
        return url
    # Imported only when set: a command that never opens the database does not load it.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        dialect = parsed.get_dialect().get_async_dialect_cls(parsed)
    except (ArgumentError, ValueError):  # an unknown scheme too (NoSuchModuleError)
        raise ValueError(f"not a database URL; {DATABASE_URL_FORMS}") from None
    if dialect.name not in _DATABASES or not dialect.is_async:
        raise ValueError(
            f"{dialect.name}+{dialect.driver} is not one knowledgeops can use (SQLite or "
            f"PostgreSQL with an asyncio driver); {DATABASE_URL_FORMS}"
        )
    try:
        dialect.import_dbapi()
    except ImportError:
        raise ValueError(
            f"its driver {dialect.driver} is not installed; {DATABASE_URL_FORMS}"
        ) from None
    return url


def check_storage_url(url: str, setting: str) -> str:
    from knowledgeops.storage.opening import check_url
    from knowledgeops.storage.store import StorageConfigError

    try:
        return check_url(url, setting)
    except StorageConfigError as e:
        raise ValueError(str(e)) from None


def check_s3_endpoint(url: str) -> str:
    """What the S3 store checks when it opens (knowledgeops/storage/s3.py)."""
    endpoint = url.strip().rstrip("/")
    if not endpoint:
        return url
    if "@" in urlsplit(endpoint).netloc:
        raise ValueError(
            "AWS_ENDPOINT_URL must not hold credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    if not http_url(endpoint):
        raise ValueError(
            "not an http:// or https:// URL with a host (e.g. http://minio:9000); leave "
            "AWS_ENDPOINT_URL empty for AWS S3"
        )
    return url


def _uses_s3(earlier: Mapping[str, Any]) -> bool:
    urls = (earlier.get("storage_url", ""), earlier.get("backup_url", ""))
    return any(str(u).strip().lower().startswith("s3:") for u in urls)
