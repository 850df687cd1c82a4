"""STORAGE_URL on a real S3-protocol server (rclone on loopback): stored files and chunk files
live in the store, the data folder is only this machine's working copy. Import, read, re-import
and delete work with the working copy thrown away between steps, and leave exactly the
document's live objects in the store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.document_import import ChunkingOptions
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files import file_store
from knowledgeops.files.data_files import open_storage
from knowledgeops.files.outputs import OutputStore
from knowledgeops.index.live import LiveIndex, switch_live
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.runtime.resources import Resources
from knowledgeops.storage.local import LocalStore
from starter.services.search import search
from tests.helpers.environment import EXAMPLES, ROOT, running_env, settings_env
from tests.helpers.s3_server import rclone_s3


def forget_working_copy(settings: Settings) -> None:
    """What another machine's data folder holds of the documents: nothing."""
    for folder in (settings.files_dir, settings.chunks_dir):
        shutil.rmtree(folder, ignore_errors=True)


async def test_import_read_reimport_and_delete_keep_their_files_in_the_store(
    settings: Settings, tmp_path: Path
) -> None:
    with rclone_s3(tmp_path / "s3") as s3:
        cfg = s3.settings(settings)
        async with running_env(cfg) as env:
            ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
            st = await env.service.wait(ref.task_id, timeout=90)
            assert st.status == "completed", st.last_error
            doc = ref.document_id
            first = await env.documents.get(doc)
            row = await DocumentCatalogue(env.db).get(doc)
            assert row is not None
            version = (await env.live_chunks(doc)).version
            assert s3.keys(f"chunks/{doc}") == [
                f"chunks/{doc}/{doc}~{version}.idx",
                f"chunks/{doc}/{doc}~{version}.jsonl",
            ]
            assert s3.keys("files") == [f"files/{row.file_id}"]

            forget_working_copy(cfg)
            page = await env.documents.chunks(doc, offset=0, limit=3)
            assert page.total == first.indexed_chunks > 0
            assert "spaced" in page.chunks[0].text.lower()

            # Again, from the store only: a new version replaces the old one there too.
            forget_working_copy(cfg)
            other = tmp_path / "replacement.md"
            other.write_text("# Interleaving\n\nMixing topics in one session helps recall.\n")
            ref2 = await env.documents.import_file(other, document_id=doc)
            st = await env.service.wait(ref2.task_id, timeout=90)
            assert st.status == "completed", st.last_error
            new = (await env.live_chunks(doc)).version
            assert new != version
            assert s3.keys(f"chunks/{doc}") == [
                f"chunks/{doc}/{doc}~{new}.idx",
                f"chunks/{doc}/{doc}~{new}.jsonl",
            ]
            hits = await search(env.store, env.embedder, "interleaving topics recall", k=1)
            assert hits and hits[0].document_id == doc
            assert "Interleaving" in hits[0].text

            row = await DocumentCatalogue(env.db).get(doc)
            assert row is not None
            new_file = row.file_id
            forget_working_copy(cfg)
            deleted = await env.documents.delete(doc, actor="test")
            st = await env.service.wait(deleted.task_id, timeout=90)
            assert st.status == "completed", st.last_error
            assert s3.keys(f"chunks/{doc}") == []
            assert f"files/{new_file}" not in s3.keys("files")
            assert not file_store.path_for(cfg.files_dir, new_file).exists()


def test_a_wrong_storage_secret_or_bucket_stops_start_up_naming_the_setting(
    settings: Settings, tmp_path: Path
) -> None:
    def worker(cfg: Settings) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "worker.py"), "--pool", "parse"],
            cwd=ROOT,
            env=settings_env(cfg),
            capture_output=True,
            text=True,
            timeout=60,
        )

    with rclone_s3(tmp_path / "s3") as s3:
        wrong_secret = worker(s3.settings(settings, aws_secret_access_key="not-the-secret"))
        no_bucket = worker(s3.settings(settings, storage_url="s3://no-such-bucket/x"))
    assert wrong_secret.returncode == 1, wrong_secret.stderr[-2000:]
    assert "AWS_SECRET_ACCESS_KEY" in wrong_secret.stderr
    assert "not-the-secret" not in wrong_secret.stderr + wrong_secret.stdout
    assert no_bucket.returncode == 1, no_bucket.stderr[-2000:]
    assert "no-such-bucket" in no_bucket.stderr and "STORAGE_URL" in no_bucket.stderr


async def test_a_worker_without_the_index_splits_as_the_live_index_says(
    settings: Settings, tmp_path: Path
) -> None:
    """A parse worker on another machine than the embedded index's owner cannot read the
    index's files: the owner shares which chunking a re-index chose through the store."""
    with rclone_s3(tmp_path / "s3") as s3:
        cfg = s3.settings(settings)
        async with running_env(cfg) as env:
            model = env.embedder.model_id
            elsewhere = cfg.model_copy(update={"data_dir": tmp_path / "parse-machine"})
            parser = Resources(elsewhere, env.db, None, env.embedder)
            assert (await parser.live_index()).chunking is None  # nothing shared yet

            owner = Resources(cfg, env.db, env.store, env.embedder)
            rebuilt = LiveIndex(
                VectorIndex.collection_name(model, "t2"),
                model,
                ChunkingOptions(chunk_tokens=40, overlap_tokens=4),
            )
            dimension = len((await env.embedder.embed(["dimension"]))[0])
            await switch_live(env.store, rebuilt, dimension)
            await owner.share_live_index()
            assert s3.keys("index") == ["index/live.json"]
            assert await parser.live_index() == rebuilt


async def test_an_installation_uploads_its_data_folder_when_it_starts_sharing(
    settings: Settings, tmp_path: Path
) -> None:
    async with running_env(settings) as env:  # no STORAGE_URL yet: the data folder only
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
        st = await env.service.wait(ref.task_id, timeout=90)
        assert st.status == "completed", st.last_error
        doc = ref.document_id
        before = await env.documents.chunks(doc, offset=0, limit=50)
        usage = TokenUsage(input_tokens=7, output_tokens=3)
        await OutputStore(LocalStore(settings.data_dir)).save("t-output", usage)
    # An earlier installation's pointer file, with no row in the database.
    (settings.chunks_dir / "doc-legacy.live").write_text("v-old")

    with rclone_s3(tmp_path / "s3") as s3:
        cfg = s3.settings(settings)

        def upload() -> str:
            done = subprocess.run(
                [sys.executable, "-m", "starter.cli.main", "storage", "upload"],
                cwd=ROOT,
                env=settings_env(cfg),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            return done.stdout

        first = upload()
        assert "copied 4 files" in first and "1 live-version pointer files moved" in first
        assert s3.keys(f"chunks/{doc}") == [
            f"chunks/{doc}/{doc}~{before.version}.idx",
            f"chunks/{doc}/{doc}~{before.version}.jsonl",
        ]
        assert len(s3.keys("files")) == 1 and s3.keys("outputs") == ["outputs/t-output.json"]
        again = upload()
        assert "copied 0 files" in again and "4 were there already" in again

        async with running_env(cfg) as env:
            forget_working_copy(cfg)
            assert await env.documents.chunks(doc, offset=0, limit=50) == before
            stored = await OutputStore(open_storage(cfg)[0]).load("t-output")
            assert TokenUsage.model_validate(stored) == usage
            versions = LiveVersions(env.db, cfg.chunks_dir)
            assert await versions.get("doc-legacy") == "v-old"
            assert "doc-legacy" in await versions.documents()


async def test_idle_copies_leave_the_working_copy_only_when_the_store_has_them(
    settings: Settings, tmp_path: Path
) -> None:
    with rclone_s3(tmp_path / "s3") as s3:
        cfg = s3.settings(settings)
        files = open_storage(cfg)[1]
        chunks = cfg.chunks_dir
        chunks.mkdir(parents=True)
        idle, used, unsent, pointer = (
            chunks / "doc-a~v1.jsonl",
            chunks / "doc-b~v1.jsonl",
            chunks / "doc-c~v1.jsonl",
            chunks / "doc-d.live",
        )
        for path in (idle, used, unsent, pointer):
            path.write_text(f"{path.name}\n")
        await files.send(idle, used)
        day_ago = time.time() - 86400
        for path in (idle, used, unsent, pointer):
            os.utime(path, (day_ago, day_ago))
        assert await files.fetch(used)  # read again today

        assert await files.trim(older_than=3600) == 1
        assert not idle.exists() and used.exists() and unsent.exists() and pointer.exists()
        assert await files.fetch(idle) and idle.read_text() == "doc-a~v1.jsonl\n"
        # A copy that differs from the store's object is not the store's: it stays.
        used.write_text("changed here\n")
        os.utime(used, (day_ago, day_ago))
        assert await files.trim(older_than=3600) == 0 and used.exists()
