"""Cleanup, backup and restore with STORAGE_URL (a real S3-protocol server on loopback,
`rclone serve s3`): the store holds the true copies of stored files and chunk files, the data
folder is each machine's working copy. Real Temporal dev server, worker, embedded index, the
real `knowledgeops restore` process."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from pathlib import Path

import obstore
import obstore.store
from temporalio.testing import ActivityEnvironment

from activities.cleanup import CleanupActivities
from knowledgeops.backup.archive import read_listing
from knowledgeops.backup.store import pool_dir
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import RemoveOrphansRequest
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files.chunk_store import ChunkReader
from knowledgeops.files.data_files import open_storage
from knowledgeops.runtime.resources import Resources
from starter.services.search import search
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import running_env
from tests.helpers.maintenance import backup, cleanup, cli, empty_database, file_id_of, imported
from tests.helpers.s3_server import S3Server, rclone_s3

TWO_HOURS = 2 * 3600
KINDS = ["files", "chunks", "points"]


def object_path(server: S3Server, key: str) -> Path:
    """Where rclone keeps the object `key` (read, never written: rclone caches its folder)."""
    return server.root / server.bucket / server.url.split("/", 3)[3] / key


async def put_old(server: S3Server, key: str, data: bytes, age: float) -> None:
    """An object last written `age` seconds ago: rclone takes an object's time from the
    X-Amz-Meta-Mtime header (the Store interface has no way to set it)."""
    raw = obstore.store.S3Store(
        server.bucket,
        prefix=server.url.split("/", 3)[3],
        config={
            "endpoint": server.endpoint,
            "access_key_id": server.key,
            "secret_access_key": server.secret,
            "region": server.region,
            "virtual_hosted_style_request": False,
        },
        client_options={"allow_http": True},
    )
    await obstore.put_async(raw, key, data, attributes={"mtime": f"{time.time() - age:.3f}"})


def working_name(key: str) -> str:
    """A store key's path in the data folder (chunk files are flat there)."""
    parts = key.split("/")
    return f"chunks/{parts[2]}" if parts[0] == "chunks" else key


async def test_cleanup_removes_orphans_that_are_only_in_the_store(
    settings: Settings, tmp_path: Path
) -> None:
    kept_src, orphan_src = tmp_path / "kept.txt", tmp_path / "orphan.txt"
    kept_src.write_text(numbered_paragraphs(5))
    orphan_src.write_text(numbered_paragraphs(7))
    lonely = b"uploaded on another machine, never imported"
    old = b"uploaded two hours ago, never imported"
    lonely_id = hashlib.sha256(lonely).hexdigest() + ".txt"
    old_id = hashlib.sha256(old).hexdigest() + ".md"
    ghost = {
        "chunks/ghost/ghost~v1.jsonl": b'{"i": 0}\n',
        "chunks/ghost/ghost~v1.idx": b"\x00" * 16,
        "chunks/ghost/ghost~v1.sections.jsonl": b"{}\n",
    }
    # Not written by DataFiles (a chunk file under another document's folder, a report): the
    # cleanup cannot name them unambiguously, so it leaves them alone.
    strangers = {"chunks/ghost/other~v1.jsonl": b"{}\n", "reports/r.html": b"<html></html>"}

    with rclone_s3(tmp_path / "s3") as server:
        s = server.settings(settings)
        store = open_storage(s)[0]
        async with running_env(s) as env:
            kept = await imported(env, kept_src, "kept")
            kept_version = kept.result["version"]  # type: ignore[index]
            st = await imported(env, orphan_src, "orphan")
            version = st.result["version"]  # type: ignore[index]
            # Its catalogue row lost: its stored file and chunk files are orphans now.
            assert await env.documents.catalogue.delete("orphan")
            orphan_id, kept_id = file_id_of(orphan_src), file_id_of(kept_src)
            kept_keys = {
                f"files/{kept_id}",
                *(f"chunks/kept/kept~{kept_version}{x}" for x in (".jsonl", ".idx")),
            }
            orphan_chunks = [f"chunks/orphan/orphan~{version}{x}" for x in (".jsonl", ".idx")]
            assert {f"files/{orphan_id}", *orphan_chunks, *kept_keys} == set(server.keys())
            # The orphan's chunk files only in the store; its stored file in both places.
            for key in orphan_chunks:
                (s.data_dir / working_name(key)).unlink()
            assert (s.files_dir / orphan_id).exists()
            await store.put(f"files/{lonely_id}", lonely)
            await put_old(server, f"files/{old_id}", old, TWO_HOURS)
            for key, data in {**ghost, **strangers}.items():
                await store.put(key, data)
            await LiveVersions(env.db, s.chunks_dir).put("ghost", "v1")

            # Grace by the store's time: only the file the store got two hours ago is old.
            st, plan = await cleanup(env, kinds=["files"], grace_minutes=60)
            assert [(i.name, i.bytes) for i in plan.items] == [(f"files/{old_id}", len(old))]
            # Uploaded again before the removal: young again, so the removal keeps it.
            await store.put(f"files/{old_id}", old)
            activity_env = ActivityEnvironment(client=env.client)
            activities = CleanupActivities(Resources(s, env.db, env.store, env.embedder))
            request = RemoveOrphansRequest(plan_path=(st.result or {})["plan_path"], items=1)
            out = await activity_env.run(activities.remove_orphans, request)
            assert (out.removed, out.skipped["files"].items) == ({}, 1)
            assert f"files/{old_id}" in server.keys("files")

            expected = {
                ("files", f"files/{orphan_id}", orphan_src.stat().st_size),
                ("files", f"files/{lonely_id}", len(lonely)),
                ("files", f"files/{old_id}", len(old)),
                *{("chunks", working_name(k), object_path(server, k).stat().st_size)
                  for k in orphan_chunks},
                *{("chunks", working_name(k), len(data)) for k, data in ghost.items()},
                ("points", "orphan", 0),
            }  # fmt: skip
            st, plan = await cleanup(env, kinds=KINDS)  # a dry run
            assert {(i.kind.value, i.name, i.bytes) for i in plan.items} == expected
            assert len(server.keys()) == len(kept_keys) + 3 + 2 + 3 + 2, "a dry run removed"

            st, plan = await cleanup(env, kinds=KINDS, dry_run=False)
            assert {(i.kind.value, i.name, i.bytes) for i in plan.items} == expected
            result = st.result or {}
            assert result["removed"] == result["found"] and not result["skipped"]
            assert set(server.keys()) == kept_keys | set(strangers)
            assert not (s.files_dir / orphan_id).exists(), "the working copy stayed"
            for key in kept_keys:
                assert (s.data_dir / working_name(key)).exists(), key
            pointers = LiveVersions(env.db, s.chunks_dir)
            assert await pointers.get("ghost") is None and await pointers.get("orphan") is None
            assert await pointers.get("kept") == kept_version
            hits = await search(env.store, env.embedder, "Paragraph 3", k=3)
            assert hits and {h.document_id for h in hits} == {"kept"}

            st, plan = await cleanup(env, kinds=KINDS, dry_run=False)
            assert plan.items == []


async def test_backup_takes_the_stores_files_and_restore_puts_them_in_an_empty_store(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "corpus.txt").write_text(numbered_paragraphs(20))
    (tmp_path / "notes.md").write_text("# Notes\n\n" + numbered_paragraphs(6, words=25))
    query = "Paragraph 7 of the generated corpus"
    with rclone_s3(tmp_path / "a") as a:
        source = a.settings(settings)
        async with running_env(source) as env:
            for name in ("corpus.txt", "notes.md"):
                await imported(env, tmp_path / name, name.split(".")[0])
            before = await search(env.store, env.embedder, query, k=5, db=env.db)
            docs = await env.documents.list()
        stored = a.keys("files") + a.keys("chunks")
        assert len(stored) == 2 + 2 * 2  # per document: its file, chunk file and offset index
        # This machine's working copy gone: the backup can only take them from the store.
        shutil.rmtree(source.files_dir)
        shutil.rmtree(source.chunks_dir)
        async with running_env(source) as env:
            first = await backup(env)
            second = await backup(env)
        assert (first["stored_files"], first["chunk_files"]) == (2, 4)
        assert (first["files_copied"], first["files_present"]) == (6, 0)
        assert (second["files_copied"], second["files_present"]) == (0, 6)
        assert not any(source.files_dir.glob("*")), "downloaded into the working copy"
        pool = pool_dir(source.backups_dir)
        listing = {e.path: e for e in read_listing(Path(first["path"]))}
        assert set(listing) == {working_name(k) for k in stored}
        for key in stored:
            blob = pool / listing[working_name(key)].blob
            assert blob.read_bytes() == object_path(a, key).read_bytes(), key

        with rclone_s3(tmp_path / "b", prefix="other") as b:
            async with empty_database(settings) as url:
                target = b.settings(source, data_dir=tmp_path / "restored", database_url=url)
                args = ["restore", str(first["path"]), "--json"]
                r = await asyncio.to_thread(cli, args, target)
                assert r.returncode == 0, r.stderr
                report = json.loads(r.stdout)
                assert (report["stored_files"], report["chunk_files"]) == (2, 4)
                assert b.keys() == sorted(stored)
                for key in stored:
                    assert object_path(b, key).read_bytes() == object_path(a, key).read_bytes()

                # An empty data folder and database, but this store holds files: refused.
                async with empty_database(settings) as other_url:
                    again = target.model_copy(
                        update={"data_dir": tmp_path / "again", "database_url": other_url}
                    )
                    r = await asyncio.to_thread(cli, args, again)
                    assert r.returncode == 1, r.stdout
                    assert "not empty" in r.stderr and f"2 stored files in {b.url}" in r.stderr

                # Another machine of the target, with nothing local: the store serves it.
                shutil.rmtree(target.files_dir)
                shutil.rmtree(target.chunks_dir)
                async with running_env(target) as env:
                    assert await env.documents.list() == docs
                    hits = await search(env.store, env.embedder, query, k=5, db=env.db)
                    assert [(h.document_id, h.chunk_index, h.text) for h in hits] == [
                        (h.document_id, h.chunk_index, h.text) for h in before
                    ]
                    data = env.documents.files
                    version = await LiveVersions(env.db, target.chunks_dir).get("corpus")
                    await data.fetch_version("corpus", version)
                    reader = ChunkReader(target.chunks_dir, "corpus", version)
                    try:
                        chunks = reader.read(0, reader.count)
                    finally:
                        reader.close()
                    assert [c.text for c in chunks if c.index == hits[0].chunk_index] == [
                        hits[0].text
                    ]
