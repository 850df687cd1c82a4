"""BACKUP_EXECUTE and restore end to end: real Temporal dev server, real worker, embedded
Qdrant, the real `knowledgeops restore` process; embeddings counted by the fake server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.backup import BackupActivities
from knowledgeops.backup.archive import (
    load_manifest,
    part_of,
    read_listing,
    read_points,
    verify,
    write_points,
)
from knowledgeops.backup.store import MANIFEST, list_archives, listed_blobs, pool_dir
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.backup import BackupStageRequest, FilesCheckpoint
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.contracts.search import SearchMode
from knowledgeops.files import file_store
from knowledgeops.index.embedding_cache import cache_collection
from knowledgeops.runtime.resources import Resources
from starter.services.search import search
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import EXAMPLES, PG_URL, Env, openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.maintenance import WAIT, backup, cli, empty_database

QUERIES = [
    "Paragraph 7 of the generated corpus",
    "How does water get into aquifers underground?",
    "harbor market theory garden",
]


async def test_backup_wipe_restore_gives_the_same_documents_and_hits_without_embedding(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    source = openai_settings(settings, fake_openai)
    (tmp_path / "corpus.txt").write_text(numbered_paragraphs(40))
    (tmp_path / "notes.md").write_text("# Notes\n\n" + numbered_paragraphs(12, words=25))
    files = [tmp_path / "corpus.txt", tmp_path / "notes.md", EXAMPLES / "water-cycle.pdf"]
    async with running_env(source) as env:
        refs = [await env.documents.import_file(p) for p in files]
        for ref in refs:
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            assert st.status == "completed", st.last_error
        docs_before = await env.documents.list()
        hits_before = {q: await search(env.store, env.embedder, q, k=5, db=env.db) for q in QUERIES}
        points = await env.points()
        # The embedding cache is backed up with the index: a restore never pays for a vector.
        cached = await env.store.count(cache_collection(env.embedder.model_id))
        assert cached == points  # every chunk text differs

        first = await backup(env, label="first")
        # Per document: its chunk file and offset index (the live-version pointer is a row
        # of the database, which is in the archive too).
        assert (first["stored_files"], first["chunk_files"], first["index_points"]) == (
            3,
            6,
            points + cached,
        )
        assert (first["files_copied"], first["files_present"]) == (9, 0)
        assert first["database_kind"] == ("postgresql" if PG_URL else "sqlite")
        archive = Path(first["path"])
        manifest = load_manifest(archive)
        assert manifest.label == "first" and verify(archive, manifest) == []
        assert sum(c.points for c in manifest.index) == points + cached
        listed = {e.path for e in read_listing(archive)}
        assert {p for p in listed if p.startswith("files/")} == {
            f"files/{d.file_id}"
            for d in [await env.documents.catalogue.get(r.document_id) for r in refs]
            if d
        }

        # Incremental: nothing new was stored, so nothing is copied.
        second = await backup(env)
        assert (second["files_copied"], second["files_present"], second["bytes_copied"]) == (
            0,
            9,
            0,
        )
        assert [p.name for p in list_archives(source)] == [first["archive"], second["archive"]]
        assert first["archive"] < second["archive"]
    paid = fake_openai.embedded_count()

    async with empty_database(settings) as url:
        target = source.model_copy(update={"data_dir": tmp_path / "restored", "database_url": url})

        # A damaged archive is refused before anything is written.
        damaged = tmp_path / "damaged"
        shutil.copytree(source.backups_dir, damaged)
        blob = sorted(pool_dir(damaged).iterdir())[0]
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
        r = cli(["restore", str(damaged / second["archive"])], target)
        assert r.returncode == 1, r.stdout
        assert "checksum mismatch" in r.stderr and "nothing was restored" in r.stderr
        assert not target.files_dir.exists() and not (target.data_dir / "app.db").exists()

        # Into an empty data directory: everything back, no embedding paid.
        r = cli(["restore", str(source.backups_dir / second["archive"]), "--json"], target)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert (report["documents"], report["points"]) == (3, points + cached)
        assert (report["stored_files"], report["chunk_files"]) == (3, 6)

        # Over data: refused unless --force.
        r = cli(["restore", str(source.backups_dir / first["archive"])], target)
        assert r.returncode == 1 and "not empty" in r.stderr, r.stderr
        r = cli(["restore", str(source.backups_dir / first["archive"]), "--force"], target)
        assert r.returncode == 0, r.stderr
        assert "3 documents" in r.stdout and f"{points + cached} index points" in r.stdout
        assert fake_openai.embedded_count() == paid, "the restore paid for embeddings"

        async with running_env(target) as env:
            # A worker holds the embedded index: the restore says so and stops.
            args = ["restore", str(source.backups_dir / second["archive"]), "--force"]
            r = await asyncio.to_thread(cli, args, target)
            assert r.returncode == 1 and "held by another process" in r.stderr, r.stderr
            docs_after = await env.documents.list()
            assert docs_after == docs_before
            assert await env.points() == points
            for q in QUERIES:
                hits = await search(env.store, env.embedder, q, k=5, db=env.db)
                assert [(h.document_id, h.chunk_index, h.text, h.title) for h in hits] == [
                    (h.document_id, h.chunk_index, h.text, h.title) for h in hits_before[q]
                ]
                assert [h.score for h in hits] == [h.score for h in hits_before[q]]
            queries_embedded = len(QUERIES)
            for p in source.files_dir.iterdir():
                assert (target.files_dir / p.name).read_bytes() == p.read_bytes()
            # The restored index still knows every chunk: a re-import embeds nothing.
            again = await env.documents.import_file(files[0])
            st = await env.service.wait(again.task_id, timeout=WAIT)
            assert st.result is not None and st.result["embedded"] == 0
            assert fake_openai.embedded_count() == paid + queries_embedded


async def test_retention_keeps_backup_keep_archives_and_prunes_the_pool(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    s = openai_settings(settings, fake_openai, backup_keep=2)
    (tmp_path / "a.txt").write_text(numbered_paragraphs(10))
    (tmp_path / "b.txt").write_text(numbered_paragraphs(14))
    async with running_env(s) as env:
        refs = [await env.documents.import_file(tmp_path / n) for n in ("a.txt", "b.txt")]
        for ref in refs:
            assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "completed"
        first = await backup(env)
        deleting = await env.documents.delete(refs[0].document_id, actor="test")
        assert (await env.service.wait(deleting.task_id, timeout=WAIT)).status == "completed"
        second = await backup(env)
        root = s.backups_dir
        only_first = listed_blobs(root / first["archive"]) - listed_blobs(root / second["archive"])
        # a.txt's stored file, chunk file and offset index
        assert len(only_first) == 3
        assert all((pool_dir(root) / b).exists() for b in only_first)  # still needed by first
        # An unfinished archive from a backup that was killed long ago.
        (root / "20000101T000000Z-dead").mkdir()
        (root / "20000101T000000Z-dead" / "files.jsonl").write_text("")

        # Through the command line this time (the worker of this test runs it).
        r = await asyncio.to_thread(cli, ["backup", "--follow", "--json"], s)
        assert r.returncode == 0, r.stderr
        [status] = json.loads(r.stdout)
        assert (status["task_type"], status["status"]) == ("BACKUP_EXECUTE", "completed")
        third = status["result"]
        assert third["archives_removed"] == [first["archive"]]
        assert [p.name for p in list_archives(s)] == [second["archive"], third["archive"]]
        assert not (root / "20000101T000000Z-dead").exists()
        kept = listed_blobs(root / second["archive"]) | listed_blobs(root / third["archive"])
        assert {p.name for p in pool_dir(root).iterdir()} == kept
        assert not only_first & kept and third["blobs_removed"] == 3
        for archive in list_archives(s):
            assert verify(archive, load_manifest(archive)) == []


async def test_a_crashed_files_stage_resumes_from_its_checkpoint(env: Env, tmp_path: Path) -> None:
    s = env.settings
    for i in range(6):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
        file_store.store_path(s.files_dir, tmp_path / f"f{i}.txt", s.max_file_bytes)
    activities = BackupActivities(Resources(s, env.db, env.store, env.embedder))
    req = BackupStageRequest(archive="20250101T000000Z-resume")
    seen: list[FilesCheckpoint] = []

    def crash_at_third(*details: Any) -> None:
        cp = FilesCheckpoint.model_validate(details[0])
        if cp.done == 3:
            raise RuntimeError("worker killed")
        seen.append(cp)

    first = ActivityEnvironment()
    first.on_heartbeat = crash_at_third
    with pytest.raises(RuntimeError, match="worker killed"):
        await first.run(activities.backup_files, req)
    last = seen[-1]
    assert (last.done, last.copied) == (2, 2)

    resumed: list[FilesCheckpoint] = []
    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, heartbeat_details=[last.model_dump()])
    second.on_heartbeat = lambda *d: resumed.append(FilesCheckpoint.model_validate(d[0]))
    result = await second.run(activities.backup_files, req)
    assert min(cp.done for cp in resumed) == 2, "the retry started over instead of resuming"
    assert result.stored_files == 6 and result.copied + result.present == 6
    # The listing names every file exactly once (the line after the checkpoint was rewritten).
    listed = [e.path for e in read_listing(s.backups_dir / req.archive)]
    assert sorted(listed) == sorted(f"files/{p.name}" for p in s.files_dir.iterdir())
    assert len(listed) == len(set(listed)) == 6


# What chunk points carried before the index had keyword vectors, owners and tags.
_EARLIER_FIELDS = {
    "document_id",
    "chunk_index",
    "text",
    "page",
    "heading",
    "h",
    "version",
    "staged",
}


def _as_an_earlier_version_wrote_it(archive: Path) -> None:
    """Rewrite an archive's index parts with the payload an earlier version exported (no
    owner, tags or heading context on chunk points), and its manifest's checksums to match."""
    manifest = load_manifest(archive)
    for collection in manifest.index:
        parts = []
        for part in collection.parts:
            points = read_points(archive / part.path)
            if collection.name.startswith("chunks_"):
                points = [
                    dataclasses.replace(
                        p, payload={k: v for k, v in p.payload.items() if k in _EARLIER_FIELDS}
                    )
                    for p in points
                ]
            write_points(archive / part.path, points)
            parts.append(part_of(archive, part.path))
        collection.parts = parts
    (archive / MANIFEST).write_text(manifest.model_dump_json(indent=2))


async def test_an_archive_of_an_earlier_version_restores_with_keyword_search_and_scopes(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    source = openai_settings(settings, fake_openai)
    async with running_env(source) as env:
        mine = await env.documents.import_file(
            EXAMPLES / "photosynthesis.html",
            metadata=DocumentMetadata(owner="ann", tags=["bio"]),
        )
        other = await env.documents.import_file(EXAMPLES / "temporal-retries.md")
        for ref in (mine, other):
            assert (await env.service.wait(ref.task_id, timeout=WAIT)).status == "completed"
        archive = Path((await backup(env))["path"])
    await asyncio.to_thread(_as_an_earlier_version_wrote_it, archive)
    assert verify(archive, load_manifest(archive)) == []
    async with empty_database(settings) as url:
        target = source.model_copy(update={"data_dir": tmp_path / "restored", "database_url": url})
        r = await asyncio.to_thread(cli, ["restore", str(archive)], target)
        assert r.returncode == 0, r.stderr
        async with running_env(target) as env:
            # Keyword vectors were made from the restored text; owner and tags came from the
            # restored catalogue onto the points, so scoped search filters inside the engine.
            hits = await search(env.store, env.embedder, "RuBisCO", k=3, mode=SearchMode.KEYWORD)
            assert hits and hits[0].document_id == mine.document_id
            scoped = await search(env.store, env.embedder, "retries activity", k=5, owner="ann")
            assert {h.document_id for h in scoped} == {mine.document_id}
            tagged = await search(env.store, env.embedder, "water", k=5, tags=["bio"])
            assert {h.document_id for h in tagged} == {mine.document_id}
