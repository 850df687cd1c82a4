"""DOCUMENT_IMPORT end to end: real Temporal dev server, real worker, real embedded Qdrant."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.search import SearchMode
from starter.services.search import search
from starter.services.task_models import TaskStatus
from tests.helpers.documents import import_and_wait, numbered_paragraphs
from tests.helpers.environment import EXAMPLES, Env, openai_settings, running_env
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault
from tests.helpers.temporal import activity_starts
from tests.helpers.waiting import eventually

WAIT = 90.0


async def test_every_example_imports_and_search_finds_the_right_chunk(env: Env) -> None:
    refs = [await env.documents.import_file(p) for p in sorted(EXAMPLES.iterdir())]
    statuses = await asyncio.gather(*(env.service.wait(r.task_id, timeout=WAIT) for r in refs))
    for ref, st in zip(refs, statuses, strict=True):
        assert st.status == "completed", (ref.task_id, st.last_error)
        assert st.result is not None
        assert await env.points(ref.document_id) == st.result["total_chunks"] > 0
    docs = {p.name: r.document_id for p, r in zip(sorted(EXAMPLES.iterdir()), refs, strict=True)}

    async def top(q: str, mode: SearchMode = SearchMode.HYBRID) -> object:
        return (await search(env.store, env.embedder, q, k=3, mode=mode))[0]

    hit = await top("Where is water split and oxygen released during photosynthesis?")
    assert hit.document_id == docs["photosynthesis.html"]  # type: ignore[attr-defined]
    assert "oxygen" in hit.text  # type: ignore[attr-defined]
    hit = await top("How does water get into aquifers underground?")
    assert (hit.document_id, hit.page) == (docs["water-cycle.pdf"], 2)  # type: ignore[attr-defined]
    hit = await top("如何避免重复导入时产生重复数据？")
    assert hit.document_id == docs["向量检索.md"]  # type: ignore[attr-defined]
    assert "重复" in hit.text  # type: ignore[attr-defined]
    # Cross-language: an English question finds the Chinese section by meaning (the dense
    # ranking's part; the keyword one matches English words in English documents).
    question = "Why split long documents into chunks before embedding?"
    hit = await top(question, SearchMode.DENSE)
    assert hit.document_id == docs["向量检索.md"]  # type: ignore[attr-defined]
    hits = await search(env.store, env.embedder, question, k=5)
    assert docs["向量检索.md"] in {h.document_id for h in hits}
    hit = await top("What can a heartbeat carry so the next attempt resumes?")
    assert hit.document_id == docs["temporal-retries.md"]  # type: ignore[attr-defined]
    assert hit.heading.endswith("Heartbeats")  # type: ignore[attr-defined]


async def test_task_type_search_attribute_and_pending_status(settings: Settings) -> None:
    async with running_env(settings, worker=False) as env:
        ref = await env.documents.import_file(EXAMPLES / "spaced-repetition.txt")
        st = await env.service.get_status(ref.task_id)
        assert (st.status, st.task_type) == ("pending", "DOCUMENT_IMPORT")
        query = f'TaskType = "DOCUMENT_IMPORT" AND WorkflowId = "{ref.task_id}"'

        async def found() -> list[str]:
            return [w.id async for w in env.client.list_workflows(query)]

        # Visibility is eventually consistent.
        assert await eventually(found, bool, what=query) == [ref.task_id]
    async with running_env(settings) as env:
        st = await env.service.wait(ref.task_id, timeout=WAIT)
        assert st.status == "completed"


async def test_bad_file_fails_at_once_and_disturbs_nothing(env: Env, tmp_path: Path) -> None:
    good = await import_and_wait(env, EXAMPLES / "spaced-repetition.txt", document_id="kept")
    n = good.result["total_chunks"]  # type: ignore[index]
    bad = tmp_path / "kept.pdf"
    bad.write_bytes(b"%PDF-1.7\n garbage that is not a pdf body")
    st = await import_and_wait(env, bad, document_id="kept")
    assert st.status == "failed"
    assert st.last_error is not None and st.last_error.startswith("CorruptDocument:")
    assert "kept.pdf is not a readable PDF" in st.last_error
    # At once: its one attempt at the parse failed it, with no retry (and no backoff) before.
    assert [(a.activity, a.attempt) for a in await activity_starts(env.client, st.task_id)] == [
        ("parse_document", 1),
        ("discard_version", 1),
    ]
    assert await env.points("kept") == n, "a failed re-import must not remove the good version"
    # The worker is still healthy.
    ok = await import_and_wait(env, EXAMPLES / "photosynthesis.html")
    assert ok.status == "completed"


async def test_transient_embedding_failures_are_retried_with_retry_after(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "t.txt"
    doc.write_text(numbered_paragraphs(40))
    fake_openai.faults.extend(
        [Fault(429, retry_after=1.5), Fault(503), Fault(200, hang_seconds=3.0)]
    )
    async with running_env(openai_settings(settings, fake_openai)) as env:
        st = await import_and_wait(env, doc)
    assert st.status == "completed", st.last_error
    total = st.result["total_chunks"]  # type: ignore[index]
    assert fake_openai.embedded_count() == total and fake_openai.duplicates() == 0
    t = fake_openai.request_times
    assert t[1] - t[0] >= 1.4, "Retry-After was not honoured"
    assert fake_openai.requests == -(-total // 16) + 3


@pytest.mark.parametrize("small", [False, True], ids=["queued", "local"])
async def test_retried_activity_resumes_from_its_checkpoint(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path, small: bool
) -> None:
    doc = tmp_path / "r.txt"
    doc.write_text(numbered_paragraphs(80))
    # Our client gives up at once, so the third request fails the activity attempt.
    fake_openai.fail_on[3] = Fault(500)
    # 0: not a small document, so its steps are queued activities with heartbeat checkpoints;
    # else it is one, and its steps are local activities.
    cfg = openai_settings(settings, fake_openai, openai_max_retries=0)
    cfg = cfg.model_copy(update={"small_document_bytes": 1 << 20 if small else 0})
    async with running_env(cfg) as env:
        st = await import_and_wait(env, doc)
        attempts = [(a.activity, a.attempt) for a in await activity_starts(env.client, st.task_id)]
    assert st.status == "completed", st.last_error
    assert ("embed_chunks", 2) in attempts
    total = st.result["total_chunks"]  # type: ignore[index]
    assert fake_openai.embedded_count() == total, "the retry re-embedded finished batches"
    result = st.result or {}
    if small:
        # A local activity has no heartbeat: the second attempt finds the first one's batches
        # in the embedding cache (paid once, counted as reused).
        assert result["embedded"] + result["reused"] == total and result["reused"] > 0
    else:
        assert result["embedded"] == total


async def test_a_manual_retry_of_a_small_document_keeps_its_local_steps(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Local steps are the payload's, not the run's priority: a manual retry (a new run at the
    default priority) of a small document's failed import runs them locally again."""
    doc = tmp_path / "note.txt"
    doc.write_text(numbered_paragraphs(3))
    fake_openai.fail_on[1] = Fault(401)  # refused: the import fails at once, not retried
    async with running_env(openai_settings(settings, fake_openai)) as env:
        failed = await import_and_wait(env, doc)
        assert failed.status == "failed", failed.last_error
        await env.service.retry(failed.task_id, reason="test", actor="test")
        st = await env.service.wait(failed.task_id, timeout=WAIT)
        history = await env.client.get_workflow_handle(st.task_id).fetch_history()
        attempts = [(a.activity, a.attempt) for a in await activity_starts(env.client, st.task_id)]
    assert st.status == "completed", st.last_error
    queued = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert queued == [] and ("embed_chunks", 1) in attempts, attempts


async def test_rejected_key_fails_without_retry_and_cleans_up(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "k.txt"
    doc.write_text(numbered_paragraphs(10))
    bad = openai_settings(settings, fake_openai, openai_api_key="wrong")
    async with running_env(bad) as env:
        st = await import_and_wait(env, doc)
        assert st.status == "failed"
        assert st.last_error is not None
        assert st.last_error.startswith("EmbeddingRejected:")
        assert "401" in st.last_error and "OPENAI_API_KEY" in st.last_error
        attempts = [(a.activity, a.attempt) for a in await activity_starts(env.client, st.task_id)]
        assert [a for a in attempts if a[0] == "embed_chunks"] == [("embed_chunks", 1)]
        assert await env.points(staged=True) == 0


async def test_cancel_stops_embedding_and_leaves_nothing_half_done(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    doc = tmp_path / "c.txt"
    doc.write_text(numbered_paragraphs(400))
    # A client timeout long enough that a held request is not given up and sent again.
    cfg = openai_settings(settings, fake_openai, openai_timeout_seconds=120.0)
    async with running_env(cfg) as env:
        # Five embedding requests (batches of 16) are answered, the sixth waits at the fake's
        # gate: the cancel lands in the middle of the embed step, whatever the machine's speed.
        before = fake_openai.requests
        fake_openai.hold = lambda kind, n: kind == "embeddings" and n > before + 5
        ref = await env.documents.import_file(doc)
        statuses: list[TaskStatus] = []

        async def state() -> tuple[str, str | None, int, int]:
            st = await env.service.get_status(ref.task_id)
            statuses.append(st)
            return st.status, st.progress.stage, st.progress.done, fake_openai.held

        # A batch's checkpoint moves on once its cache write lands, during the next request:
        # with the sixth request held, four batches (64 chunks) show.
        await eventually(
            state,
            lambda s: s[0] == "running" and s[2] >= 64 and s[3] == 1,
            timeout=60,
            what="running, 64 chunks done, the next request held",
        )
        st = statuses[-1]
        assert st.progress.total and st.progress.total > 300
        assert st.progress.unit == "chunks"
        seen = [s.progress.done for s in statuses if s.progress.stage == "embedding"]
        assert seen == sorted(seen) and seen[-1] >= 64, "progress must be visible and grow"
        # Progress never runs ahead of the model: at most the five answered batches.
        assert st.progress.done <= 5 * 16, st.progress
        # Nothing of an unfinished import is searchable.
        assert await env.points(ref.document_id) == 0
        await env.service.cancel(ref.task_id)
        final = await env.service.wait(ref.task_id, timeout=WAIT)
        # Cancelled while its request was still held: the cancel (delivered with a heartbeat)
        # did not wait for the model, and nothing was asked after it.
        assert (fake_openai.held, fake_openai.requests - before) == (1, 6)
        assert final.status == "cancelled"
        assert await env.points(ref.document_id, staged=True) == 0
        # The cancelled version's files are gone too (chunks and parsed sections).
        assert [p.name for p in env.settings.chunks_dir.iterdir()] == []
        # Cancelled means its activity has stopped (the workflow waits for that): the request
        # it had in flight, once released, drains and no other follows.
        fake_openai.release()
        await eventually(lambda: fake_openai.in_flight, lambda n: n == 0, what="in flight")
        assert fake_openai.requests - before == 6, "embedding went on after the cancel"
        assert fake_openai.embedded_count() < st.progress.total
        with pytest.raises(Exception, match="already finished"):
            await env.service.cancel(ref.task_id)


async def test_document_outlives_its_task_in_temporal(env: Env) -> None:
    """Temporal's retention removes closed tasks; the catalogue still answers for the document."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest

    from starter.services.task_models import TaskNotFoundError

    st = await import_and_wait(env, EXAMPLES / "spaced-repetition.txt", document_id="kept-doc")
    assert st.status == "completed" and st.result is not None
    # What retention does, done now: the closed execution is deleted from Temporal.
    await env.client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=env.settings.temporal_namespace,
            workflow_execution=WorkflowExecution(workflow_id=st.task_id),
        )
    )

    async def still_there() -> bool:
        try:
            await env.service.get_status(st.task_id)
        except TaskNotFoundError:
            return False
        return True

    # The server deletes asynchronously (within a second or two with the dev server's ack
    # interval, starter/dev_server.py).
    await eventually(still_there, lambda there: not there, timeout=60, what="the deletion")
    detail = await env.documents.get("kept-doc")
    assert (detail.status, detail.task) == ("ready", None)
    assert detail.points_in_index == detail.indexed_chunks == st.result["total_chunks"]


async def test_delete_keeps_a_file_a_queued_import_will_read(
    settings: Settings, tmp_path: Path
) -> None:
    """The same bytes are one stored file. An import no worker has begun has no catalogue row
    yet; deleting another document with that file must still leave the file to it."""
    from knowledgeops.db.audit import audit_row
    from knowledgeops.db.database import Database
    from knowledgeops.documents.removal import remove_document
    from knowledgeops.index.opening import open_index
    from knowledgeops.runtime.temporal import connect
    from starter.services.documents import DocumentService
    from starter.services.tasks import TaskQueueService

    shared = tmp_path / "shared.txt"
    shared.write_text(numbered_paragraphs(4))
    async with running_env(settings) as env:
        first = await import_and_wait(env, shared, document_id="first")
        assert first.status == "completed"
    # No worker now: the second import stays queued, with no catalogue row.
    client, db, store = await connect(settings), await Database.open(settings), None
    try:
        store = open_index(settings)
        service = TaskQueueService(client, settings, db)
        documents = DocumentService(service, db, settings, store)
        queued = await documents.import_file(shared, document_id="second")
        assert (await service.get_status(queued.task_id)).status == "pending"
        assert await documents.catalogue.get("second") is None
        query = f'WorkflowId = "{queued.task_id}"'

        async def listed() -> list[str]:
            return [w.id async for w in client.list_workflows(query)]

        await eventually(listed, bool, what=query)  # visibility lists a new task within a moment
        deleting = await documents.delete("first", actor="test")
        row = await documents.catalogue.get("first")
        assert row is not None and row.status == "deleting"
        # The delete task's last step, run here while the second import is still queued:
        # the row goes, the file stays for the import no worker has begun.
        record = audit_row("test", "document_delete", [deleting.task_id], "", "deleted")
        kept = await remove_document(
            documents.catalogue, client, settings, "first", row.file_id, record
        )
        assert kept == (True, False)
        stored = list(settings.files_dir.iterdir())
        assert len(stored) == 1, "the queued import's file was deleted"
    finally:
        if store is not None:
            store.close()
        await db.close()
    async with running_env(settings) as env:
        st = await env.service.wait(queued.task_id, timeout=WAIT)
        assert st.status == "completed", st.last_error
        # The delete task finds its work done (the row) and the file in use (the import).
        done = await env.service.wait(deleting.task_id, timeout=WAIT)
        assert done.status == "completed" and done.result is not None
        assert done.result["file_removed"] is False
        assert len(list(settings.files_dir.iterdir())) == 1
