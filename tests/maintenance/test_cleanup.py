"""CLEANUP_EXECUTE end to end: every kind of orphan made for real, a dry run that lists exactly
them, a real run that removes exactly them, and everything still needed intact and searchable."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.cleanup import CleanupActivities
from knowledgeops.backup import store as backups
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.cleanup import (
    KindTotals,
    RemoveCheckpoint,
    RemoveOrphansRequest,
)
from knowledgeops.db.audit import AuditLog, AuditRow
from knowledgeops.db.events import EventRow, EventStore
from knowledgeops.db.live_versions import LiveVersions
from knowledgeops.files import file_store
from knowledgeops.index.opening import open_index
from knowledgeops.index.vector_index import VectorIndex
from knowledgeops.registry.task_types import TaskQueue, TaskType
from knowledgeops.runtime.resources import Resources
from starter.services.search import search
from starter.services.task_models import PayloadInvalidError
from tests.helpers.documents import numbered_paragraphs
from tests.helpers.environment import EXAMPLES, Env, running_env
from tests.helpers.maintenance import cleanup, file_id_of, imported
from worker import build_workers

WAIT = 90.0


@asynccontextmanager
async def maintenance_worker(env: Env) -> AsyncIterator[VectorIndex]:
    """A worker for the maintenance queue only, so queued imports stay queued."""
    s = env.settings
    store = open_index(s)
    workers = [
        w
        for w in build_workers(env.client, Resources(s, env.db, store, env.embedder))
        if w.task_queue == s.queue(TaskQueue.MAINTENANCE.value)
    ]
    assert len(workers) == 1
    task = asyncio.create_task(workers[0].run())
    try:
        yield store
    finally:
        await workers[0].shutdown()
        await asyncio.gather(task, return_exceptions=True)
        store.close()


def make_archive(root: Path, name: str, blobs: list[str], manifest: bool = True) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "app.db").write_bytes(b"x" * 1000)
    (folder / backups.LISTING).write_text("".join(json.dumps({"blob": b}) + "\n" for b in blobs))
    if manifest:
        (folder / backups.MANIFEST).write_text(json.dumps({"archive": name}))
    return folder


async def test_cleanup_lists_then_removes_exactly_the_orphans(
    settings: Settings, tmp_path: Path
) -> None:
    s = settings.model_copy(update={"backup_keep": 2})
    shared, orphan, lonely, queued = (tmp_path / f"{n}.txt" for n in "abcd")
    shared.write_text(numbered_paragraphs(6))
    orphan.write_text(numbered_paragraphs(9))
    lonely.write_text("nobody imports this file")
    queued.write_text(numbered_paragraphs(4))
    now = datetime.now(UTC)

    async with running_env(s) as env:
        await imported(env, EXAMPLES / "spaced-repetition.txt", "kept")
        await imported(env, shared, "shared-a")
        await imported(env, shared, "shared-b")  # the same bytes: one stored file, two documents
        deleting = await env.documents.delete("shared-b", actor="test")
        assert (await env.service.wait(deleting.task_id, timeout=WAIT)).status == "completed"
        st = await imported(env, orphan, "orphan")
        n_orphan = st.result["total_chunks"]  # type: ignore[index]
        orphan_version = st.result["version"]  # type: ignore[index]
        # A catalogue row lost (e.g. a delete that crashed half-way): points, chunks and the
        # stored file are orphans now.
        assert await env.documents.catalogue.delete("orphan")
        # Old rows: one event and one audit record past retention, and younger ones that stay.
        async with env.db.write() as session:
            for name, days in (("old", s.event_retention_days + 1), ("young", 10)):
                session.add(EventRow(
                    event_id=f"test/{name}", event_type="TaskCompleted", task_id=f"t-{name}",
                    run_id="r", task_type="DOCUMENT_IMPORT", attempt=1,
                    at=now - timedelta(days=days), data={},
                ))  # fmt: skip
            for days in (s.audit_retention_days + 1, s.event_retention_days + 1):
                session.add(AuditRow(
                    at=now - timedelta(days=days), actor="test", action="cancel",
                    task_ids=[], reason="", outcome="requested", details={},
                ))  # fmt: skip

    lonely_id = await asyncio.to_thread(file_store.store_path, s.files_dir, lonely, 10**6)
    # A parser killed mid-write left its temp file; a live one's must stay.
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    (s.chunks_dir / f"ghost.jsonl.tmp-{dead.pid}").write_bytes(b"half a chunk file")
    (s.chunks_dir / f"busy.jsonl.tmp-{os.getpid()}").write_bytes(b"being written")
    # An upload that died two hours ago, and one in progress.
    old_upload, new_upload = s.files_dir / ".upload-dead", s.files_dir / ".upload-live"
    old_upload.write_bytes(b"partial upload")
    new_upload.write_bytes(b"partial upload")
    two_hours_ago = time.time() - 7200
    os.utime(old_upload, (two_hours_ago, two_hours_ago))
    # Backups: four complete archives (keep 2), one a killed backup left two days ago, and a
    # pool where one blob only the outgoing archives list.
    root = s.backups_dir
    stamp = (now - timedelta(days=2)).strftime("%Y%m%dT%H%M%SZ")
    archives = [
        make_archive(root, f"2025010{i}T030000Z", ["shared"] + ["gone"] * (i == 1))
        for i in range(1, 5)
    ]
    abandoned = make_archive(root, f"{stamp}-x", ["gone"], manifest=False)
    pool = backups.pool_dir(root)
    pool.mkdir()
    (pool / "gone").write_bytes(b"g" * 300)
    (pool / "shared").write_bytes(b"s" * 200)

    async with running_env(s, worker=False) as env:
        # An import nobody has picked up yet: its stored file, and chunk files of its document
        # from an earlier life, are needed.
        ref = await env.documents.import_file(queued, document_id="queued")
        assert (await env.service.get_status(ref.task_id)).status == "pending"
        (s.chunks_dir / "queued.jsonl").write_bytes(b"{}\n")
        with pytest.raises(PayloadInvalidError, match="kinds"):
            await env.service.enqueue(TaskType.CLEANUP_EXECUTE, {"kinds": ["everything"]})

        async with maintenance_worker(env) as store:
            collection = VectorIndex.collection_name(env.embedder.model_id)
            past = backups.past_retention(s)
            assert past == archives[:2]
            expected = {
                ("files", f"files/{file_id_of(orphan)}"),
                ("files", f"files/{lonely_id}"),
                ("chunks", f"chunks/orphan~{orphan_version}.jsonl"),
                ("chunks", f"chunks/orphan~{orphan_version}.idx"),
                ("points", "orphan"),
                *{("backups", str(p.relative_to(s.data_dir))) for p in [*past, abandoned]},
                ("backups", "backups/pool/gone"),
                ("temp_files", f"chunks/ghost.jsonl.tmp-{dead.pid}"),
                ("temp_files", "files/.upload-dead"),
                ("events", "task_events"),
                ("audit", "audit_log"),
            }
            paths = [s.data_dir / name for kind, name in expected if "/" in name]

            st, plan = await cleanup(env)  # dry run by default
            assert {(i.kind.value, i.name) for i in plan.items} == expected
            assert st.result is not None and st.result["dry_run"] and not st.result["removed"]
            assert all(p.exists() for p in paths), "a dry run removed something"
            assert await store.count(collection, "orphan") == n_orphan
            sizes = {i.name: (i.bytes, i.count) for i in plan.items}
            assert sizes[f"files/{lonely_id}"] == (len("nobody imports this file"), 1)
            assert sizes["orphan"] == (0, n_orphan)
            assert sizes["task_events"][1] == sizes["audit_log"][1] == 1
            assert sizes["backups/pool/gone"] == (300, 1)
            assert (st.progress.unit, st.progress.total) == ("items", len(expected))

            st, plan = await cleanup(env, dry_run=False)
            assert {(i.kind.value, i.name) for i in plan.items} == expected
            result = st.result or {}
            assert result["removed"] == result["found"] and not result["skipped"]
            assert result["removed_items"] == len(expected)
            assert result["removed_bytes"] == sum(i.bytes for i in plan.items) > 0
            assert not [p for p in paths if p.exists()], "left behind"
            assert await store.count(collection, "orphan") == 0
            pointers = LiveVersions(env.db, s.chunks_dir)
            assert await pointers.get("orphan") is None, "its live-version pointer went too"

            # Everything needed is still there.
            for needed in (
                s.files_dir / file_id_of(shared),
                s.files_dir / file_id_of(queued),
                s.files_dir / file_id_of(EXAMPLES / "spaced-repetition.txt"),
                s.chunks_dir / "queued.jsonl",
                s.chunks_dir / f"busy.jsonl.tmp-{os.getpid()}",
                new_upload,
                *archives[2:],
                pool / "shared",
            ):
                assert needed.exists(), needed
            assert await pointers.documents() == {"kept", "shared-a"}
            events = await EventStore(env.db).after(limit=1000)
            assert "test/old" not in {e.event_id for e in events}
            assert "test/young" in {e.event_id for e in events}
            assert env.documents.import_task_id("kept") in {e.task_id for e in events}
            # The delete's two (requested, deleted) and the young one.
            assert len(await AuditLog(env.db).records(actor="test")) == 3

            for doc, query in (("kept", "spaced repetition"), ("shared-a", "Paragraph 3")):
                hits = await search(store, env.embedder, query, k=3, document_id=doc)
                assert hits and {h.document_id for h in hits} == {doc}
            everything = await search(store, env.embedder, "Paragraph 3 river forest", k=50)
            assert {h.document_id for h in everything} <= {"kept", "shared-a"}

            # A second real run finds nothing.
            st, plan = await cleanup(env, dry_run=False)
            assert plan.items == []

    # The queued import still has its file: it completes once an ingest worker runs.
    async with running_env(s) as env:
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        assert st.status == "completed", st.last_error


async def test_removal_resumes_from_its_checkpoint_and_keeps_what_became_needed(
    env: Env, tmp_path: Path
) -> None:
    s = env.settings
    sources: dict[str, Path] = {}
    for i in range(4):
        src = tmp_path / f"f{i}.txt"
        src.write_text(numbered_paragraphs(3 + i))
        file_id = await asyncio.to_thread(file_store.store_path, s.files_dir, src, 10**6)
        sources[f"files/{file_id}"] = src
    st, plan = await cleanup(env, kinds=["files"])
    assert [i.name for i in plan.items] == sorted(sources)
    # Between listing and removal, an import starts using the third file.
    await imported(env, sources[plan.items[2].name], "revived")

    # A retry after a crash that had removed the first item: the heartbeat checkpoint says so.
    first = plan.items[0]
    checkpoint = RemoveCheckpoint(done=1, total=4, removed={"files": KindTotals(items=1)})
    activity_env = ActivityEnvironment(client=env.client)
    activity_env.info = dataclasses.replace(
        activity_env.info, heartbeat_details=[checkpoint.model_dump()]
    )
    beats: list[object] = []
    activity_env.on_heartbeat = lambda *details: beats.append(details[0])
    activities = CleanupActivities(Resources(s, env.db, env.store, env.embedder))
    request = RemoveOrphansRequest(plan_path=(st.result or {})["plan_path"], items=4)
    out = await activity_env.run(activities.remove_orphans, request)

    assert (s.data_dir / first.name).exists(), "the retry redid an item its checkpoint had done"
    assert (s.data_dir / plan.items[2].name).exists(), "removed a file an import needs"
    assert not (s.data_dir / plan.items[1].name).exists()
    assert not (s.data_dir / plan.items[3].name).exists()
    assert (out.removed["files"].items, out.skipped["files"].items) == (3, 1)
    assert RemoveCheckpoint.model_validate(beats[-1]).done == 4
