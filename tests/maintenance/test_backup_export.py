"""A backup as one self-contained file: written to BACKUP_URL after every backup (a real
S3-protocol server on loopback, `rclone serve s3`), kept BACKUP_KEEP deep there, and restored
alone on a machine that has nothing else of the source: by its URL, or by the archive's name
from BACKUP_URL. Real Temporal dev server, worker, embedded index, `knowledgeops` processes."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from knowledgeops.backup.export import export_key
from knowledgeops.config.settings import Settings
from knowledgeops.storage.opening import open_store
from knowledgeops.storage.store import Store
from starter.services.search import search
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import ROOT, openai_settings, running_env, settings_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.maintenance import WAIT, backup, cli, empty_database
from tests.helpers.s3_server import S3Server, free_port, rclone_s3

QUERY = "Paragraph 7 of the generated corpus"


def with_s3(settings: Settings, server: S3Server, **overrides: object) -> Settings:
    """Backups exported to the server; the files stay in the data folder (no STORAGE_URL)."""
    return server.settings(settings, storage_url="", backup_url=server.url, **overrides)


async def exports(store: Store) -> list[str]:
    return sorted(o.key for o in await store.list(""))


async def test_every_backup_goes_to_object_storage_and_restores_alone(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    (tmp_path / "corpus.txt").write_text(numbered_paragraphs(30))
    (tmp_path / "notes.md").write_text("# Notes\n\n" + numbered_paragraphs(8, words=25))
    with rclone_s3(tmp_path / "s3") as server:
        source = with_s3(openai_settings(settings, fake_openai), server, backup_keep=1)
        bucket = open_store(server.url, tmp_path / "unused", server.env())
        async with running_env(source) as env:
            for name in ("corpus.txt", "notes.md"):
                ref = await env.documents.import_file(tmp_path / name)
                st = await env.service.wait(ref.task_id, timeout=WAIT)
                assert st.status == "completed", st.last_error
            docs = await env.documents.list()
            hits = await search(env.store, env.embedder, QUERY, k=5, db=env.db)
            first = await backup(env)
            assert first["exported_to"] == f"{server.url}/{export_key(first['archive'])}"
            assert await exports(bucket) == [export_key(first["archive"])]
            size = await bucket.size(export_key(first["archive"]))
            assert size == first["export_bytes"] > 0
            # BACKUP_KEEP=1: the next export replaces the first there too.
            second = await backup(env)
            assert await exports(bucket) == [export_key(second["archive"])]
        paid = fake_openai.embedded_count()

        # A damaged export is refused before anything is written.
        damaged = tmp_path / "damaged.tar"
        await bucket.get_file(export_key(second["archive"]), damaged)
        with tarfile.open(damaged) as tar:
            blob = next(m for m in tar.getmembers() if m.name.startswith("pool/") and m.size)
        data = bytearray(damaged.read_bytes())
        data[blob.offset_data + blob.size // 2] ^= 0xFF
        damaged.write_bytes(bytes(data))
        async with empty_database(settings) as url:
            target = source.model_copy(
                update={"data_dir": tmp_path / "restored", "database_url": url}
            )
            r = cli(["restore", str(damaged)], target)
            assert r.returncode == 1 and "checksum mismatch" in r.stderr, r.stderr
            assert not target.files_dir.exists()

            # A new machine: nothing of the source's folder, only BACKUP_URL and the name.
            r = cli(["restore", second["archive"], "--json"], target)
            assert r.returncode == 0, r.stderr
            assert f"downloading {export_key(second['archive'])}" in r.stderr
            report = json.loads(r.stdout)
            assert (report["documents"], report["stored_files"]) == (2, 2)
            assert not list(target.backups_dir.glob(".restore-*")), "the download is removed"
            async with running_env(target) as env:
                assert await env.documents.list() == docs
                again = await search(env.store, env.embedder, QUERY, k=5, db=env.db)
                assert [(h.document_id, h.chunk_index, h.text) for h in again] == [
                    (h.document_id, h.chunk_index, h.text) for h in hits
                ]
            assert fake_openai.embedded_count() == paid + 1, "only the query was embedded"

        # By the URL the backup reported, into another empty target.
        async with empty_database(settings) as url:
            other = source.model_copy(update={"data_dir": tmp_path / "other", "database_url": url})
            r = cli(["restore", second["exported_to"]], other)
            assert r.returncode == 0, r.stderr
            assert "2 documents" in r.stdout


async def test_an_archive_exported_by_hand_restores_without_the_pool(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    source = openai_settings(settings, fake_openai)
    (tmp_path / "notes.md").write_text("# Notes\n\n" + numbered_paragraphs(8, words=25))
    async with running_env(source) as env:
        ref = await env.documents.import_file(tmp_path / "notes.md")
        assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "completed"
        done = await backup(env)
        assert done["exported_to"] is None and done["export_bytes"] == 0  # no BACKUP_URL
    alone = tmp_path / "elsewhere" / "copy.tar"
    alone.parent.mkdir()
    r = cli(["backup", "--export", done["archive"], "--to", str(alone)], source)
    assert r.returncode == 0, r.stderr
    assert alone.is_file() and str(alone) in r.stdout
    async with empty_database(settings) as url:
        target = source.model_copy(update={"data_dir": tmp_path / "restored", "database_url": url})
        r = cli(["restore", str(alone)], target)
        assert r.returncode == 0, r.stderr
        assert "1 documents" in r.stdout and "1 stored files" in r.stdout
    # Not a backup export: refused, saying so.
    (tmp_path / "other.tar").write_bytes(b"not a tar file at all")
    r = cli(["restore", str(tmp_path / "other.tar")], target)
    assert r.returncode == 1 and "not a backup export" in r.stderr, r.stderr


def test_a_worker_with_an_unusable_backup_url_stops_at_start(
    settings: Settings, tmp_path: Path
) -> None:
    """A wrong endpoint or key stops the maintenance worker at start-up with what to fix,
    never the secret, instead of failing the first backup hours later."""
    with rclone_s3(tmp_path / "s3") as server:
        cases = [
            (
                with_s3(settings, server, aws_endpoint_url=f"http://127.0.0.1:{free_port()}"),
                "AWS_ENDPOINT_URL",
            ),
            (
                with_s3(settings, server, aws_secret_access_key="wrong-secret-0123456789"),
                "AWS_SECRET_ACCESS_KEY",
            ),
        ]
        for bad, setting in cases:
            r = subprocess.run(
                [sys.executable, "worker.py", "--pool", "maintenance"],
                cwd=ROOT,
                env=settings_env(bad),
                capture_output=True,
                text=True,
                timeout=90,
            )
            out = r.stdout + r.stderr
            assert r.returncode == 1, out
            assert "BACKUP_URL" in out and setting in out, out
            assert bad.aws_secret_access_key not in out
