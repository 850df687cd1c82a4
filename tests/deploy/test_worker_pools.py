"""Worker pools: processes started for different kinds of work (`worker.py --pool NAME`),
each with a data folder of its own (as on machines of their own), sharing only Temporal, the
app database and the S3 store (STORAGE_URL, rclone on loopback), import documents together;
the one that owns the embedded index is the only one that opens it; killing the parse worker
mid-parse loses nothing, and the next one, on yet another data folder, finishes the parse."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState

from knowledgeops.config.settings import Settings
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import (
    EXAMPLES,
    ROOT,
    openai_settings,
    running_env,
    settings_env,
    start_worker_process,
    stop_process,
    worker_serving_api,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.s3_server import rclone_s3
from tests.helpers.temporal import activity_starts
from tests.helpers.waiting import eventually

INDEX_POOLS = ("--pool", "ingest", "--pool", "ai", "--pool", "maintenance")


def test_an_unknown_pool_stops_start_up_naming_it(settings: Settings) -> None:
    def start(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "worker.py"), *args],
            cwd=ROOT,
            env=settings_env(settings) | env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # One line on stderr, as every start-up error.
    flag = start("--pool", "parse", "--pool", "indexing")
    assert flag.returncode == 2 and flag.stdout == ""
    assert "--pool" in flag.stderr and "unknown pool(s) indexing" in flag.stderr
    assert "parse, ingest, ai, maintenance" in flag.stderr
    setting = start(WORKER_POOLS="ingest,gpu")
    assert setting.returncode == 2 and "WORKER_POOLS" in setting.stderr, setting.stderr
    assert "unknown pool(s) gpu" in setting.stderr and "Traceback" not in setting.stderr


async def test_a_parse_worker_and_an_index_worker_import_together(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    with rclone_s3(tmp_path / "s3") as s3:
        # Every parse through the parse queue (no small documents' local steps).
        cfg = s3.settings(openai_settings(settings, fake_openai, small_document_bytes=0))
        cfg.data_dir.mkdir(parents=True)  # where the shared SQLite file is, without PostgreSQL
        await _import_together(cfg, tmp_path)
        # The chunks are in the store; only the index worker's data folder has an index.
        assert any(k.endswith(".jsonl") for k in s3.keys("chunks/big"))
        assert index_folders(tmp_path) == ["index"]
        # The parse worker that finished kept no copies of what it sent (the index worker reads
        # them from the store); the killed one left what it was writing.
        assert parse_copies(tmp_path / "parse-2") == []
        # Its owner shared the live index for the parse workers (which chunking to split with).
        assert s3.keys("index") == ["index/live.json"]


def index_folders(tmp_path: Path) -> list[str]:
    """The machines (data folders) an embedded index was opened in."""
    return sorted(p.parent.name for p in tmp_path.glob("*/index") if p.is_dir())


def parse_copies(data_dir: Path) -> list[str]:
    """Parsed text and chunk files left in a parse worker's data folder."""
    return sorted(p.name for p in data_dir.glob("chunks/*") if p.is_file())


def machine(cfg: Settings, tmp_path: Path, name: str) -> Settings:
    """`cfg` on a machine of its own: its own data folder, the one app database of all."""
    return cfg.model_copy(
        update={"data_dir": tmp_path / name, "database_url": cfg.resolved_database_url}
    )


async def _import_together(cfg: Settings, tmp_path: Path) -> None:
    parse_log = tmp_path / "parse.log"
    # The parse worker first: had it opened the embedded index, the other could not start.
    parser = start_worker_process(machine(cfg, tmp_path, "parse-1"), parse_log, "--pool", "parse")
    big = tmp_path / "big.txt"
    big.write_text(numbered_paragraphs(3000, words=60))  # ~1.3 MB: a parse of seconds
    try:
        await eventually(
            lambda: asyncio.to_thread(parse_log.read_text),
            lambda text: "worker ready" in text,
            timeout=60,
            what="the parse worker's start",
        )
        assert "API on" not in parse_log.read_text()
        async with (
            worker_serving_api(
                machine(cfg, tmp_path, "index"), tmp_path / "index.log", *INDEX_POOLS
            ) as (http, api),
            running_env(machine(cfg, tmp_path, "client"), worker=False) as env,
        ):
            refs = [
                await env.documents.import_file(EXAMPLES / name)
                for name in ("spaced-repetition.txt", "temporal-retries.md")
            ]
            for ref in refs:
                st = await env.service.wait(ref.task_id, timeout=90)
                assert st.status == "completed", st.last_error
                steps = await activity_starts(env.client, ref.task_id)
                assert {a.pid for a in steps if a.activity == "parse_document"} == {parser.pid}
                assert parser.pid not in {a.pid for a in steps if a.activity == "embed_chunks"}

            # Killed mid-parse: the parse is retried on the next parse worker; nothing lost.
            ref = await env.documents.import_file(big, document_id="big")

            async def parsing() -> str | None:
                """The parse-queue step the import is running now, if any."""
                desc = await env.client.get_workflow_handle(ref.task_id).describe()
                for p in desc.raw_description.pending_activities:
                    running = p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                    if running and p.activity_type.name in ("parse_document", "chunk_document"):
                        return str(p.activity_type.name)
                return None

            step = await eventually(parsing, bool, timeout=60, what="the big file's parse")
            parser.send_signal(signal.SIGKILL)
            parser.wait()
            # On another machine: the stored file and the parsed text come from the store.
            parser = start_worker_process(
                machine(cfg, tmp_path, "parse-2"), parse_log, "--pool", "parse"
            )
            st = await env.service.wait(ref.task_id, timeout=150)
            assert st.status == "completed", st.last_error
            # The step the killed worker was running ended on the next one.
            ran = await activity_starts(env.client, ref.task_id)
            assert parser.pid in {a.pid for a in ran if a.activity == step}
            chunks = st.result["total_chunks"]  # type: ignore[index]
            detail = (await http.get(f"{api}/v1/documents/big")).json()
            assert detail["indexed_chunks"] == detail["points_in_index"] == chunks > 0
    finally:
        stop_process(parser)
