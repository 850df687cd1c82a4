"""Re-index without downtime, over real HTTP on the real dev server: search answers from the
old index throughout and from the new one (new model, new chunk size) right after the switch;
an import during the re-index ends up in the new index; a cancel leaves the live index as it
was and drops the half-built one; a killed worker's re-index is finished by the next one."""

from __future__ import annotations

import random
import signal
from functools import partial
from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.indexing import ReindexOptions
from knowledgeops.index.live import index_collections, live_index
from knowledgeops.index.opening import open_index
from starter.services.reindex import start_reindex
from tests.helpers.environment import (
    Api,
    openai_settings,
    running_api,
    running_env,
    start_worker_process,
    stop_process,
)
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.waiting import eventually

TOPICS = ("river", "forest", "harbor", "engine")
WAIT = 120.0


def document(topic: str, n: int = 8) -> str:
    # Sentences of made-up words: 64-token chunks (the tests' CHUNK_TOKENS) hold a part of a
    # paragraph, 256-token chunks more, so the re-chunked index has other chunk texts. (The
    # test model's vectors are hashes of the text: only an exact chunk text scores ~1.)
    rng = random.Random(topic)
    vocab = [a + b for a in ("ka", "lo", "mi", "su", "te", "ra") for b in ("ber", "dan", "gor")]
    sentences = (" ".join(rng.choice(vocab) for _ in range(10)) for _ in range(6 * n))
    return "\n\n".join(
        f"{topic.title()} note {i}. " + ". ".join(next(sentences) for _ in range(6)) + "."
        for i in range(n)
    )


async def top_hit(api: Api, query: str) -> dict[str, Any]:
    # By embedding: what these tests follow is which model's vectors answer (a dense score of
    # ~1 is an exact text of the index that model built).
    r = await api.http.get("/v1/search", params={"q": query, "k": 3, "mode": "dense"})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()
    assert hits, f"no hits for {query!r}"
    return hits[0]


async def task_status(api: Api, task_id: str) -> dict[str, Any]:
    # The admin API: a re-index is an operator's task, not the public token's.
    r = await api.http.get(f"/v1/admin/tasks/{task_id}", headers=api.admin)
    assert r.status_code == 200, r.text
    status: dict[str, Any] = r.json()["status"]
    return status


def closed(status: dict[str, Any]) -> bool:
    return status["status"] not in ("pending", "running")


async def wait_admin_task(api: Api, task_id: str) -> dict[str, Any]:
    return await eventually(partial(task_status, api, task_id), closed, timeout=WAIT, what=task_id)


async def index_info(api: Api) -> dict[str, Any]:
    r = await api.http.get("/v1/admin/index", headers=api.admin)
    assert r.status_code == 200, r.text
    info: dict[str, Any] = r.json()
    return info


async def import_topics(api: Api, tmp_path: Path) -> dict[str, dict[str, Any]]:
    docs = {}
    for topic in TOPICS:
        path = tmp_path / f"{topic}.txt"
        path.write_text(document(topic))
        body = await api.upload(path)
        done = await api.wait_task(body["task_id"])
        assert done["status"] == "completed", done
        docs[topic] = {"id": body["document_id"], "chunks": done["result"]["total_chunks"]}
    return docs


async def test_reindex_switches_search_with_no_downtime(settings: Settings, tmp_path: Path) -> None:
    fake = FakeOpenAI(models=("fake-embed", "fake-embed-2"), dims={"fake-embed-2": 48}).start()
    try:
        async with running_api(openai_settings(settings, fake)) as api:
            docs = await import_topics(api, tmp_path)
            before = await index_info(api)
            assert before["model"] == "openai:fake-embed" and before["chunk_tokens"] is None
            assert before["keyword_tokenization_current"], before
            old_points = sum(d["chunks"] for d in docs.values())
            # An exact chunk text: the index built with the same model answers it at score ~1.
            # (The test model's vectors are hashes: only exact texts are near.)
            old = await top_hit(api, "River note 3")
            old_text = old["text"]
            assert (await top_hit(api, old_text))["score"] > 0.99

            # Slow the model down so an import and many searches overlap the re-index.
            fake.latency = 0.5
            r = await api.http.post(
                "/v1/admin/reindex",
                headers=api.admin,
                json={
                    "model": "openai:fake-embed-2",
                    "chunk_tokens": 256,
                    "concurrency": 2,
                    "grace_seconds": 3,
                    "reason": "new model",
                },
            )
            assert r.status_code == 202, r.text
            task_id = r.json()["task_id"]
            late = tmp_path / "late.txt"
            late.write_text(document("glacier"))
            late_import = await api.upload(late)

            # Search every 50 ms until the re-index is done: always answers, and answers
            # exactly from the old index until the switch, never from the old one after.
            exact: list[bool] = []
            seen: list[Any] = []

            async def searched() -> dict[str, Any]:
                status = await task_status(api, task_id)
                hit = await top_hit(api, old_text)
                exact.append(hit["score"] > 0.99 and hit["document_id"] == old["document_id"])
                seen.append((status["progress"]["stage"], round(hit["score"], 3), hit["text"][:40]))
                return status

            status = await eventually(
                searched, closed, timeout=WAIT, interval=0.05, what="the re-index, searching"
            )
            assert status["status"] == "completed", status
            switched = exact.index(False)
            assert switched >= 3 and not any(exact[switched:]), [(a, b) for a, b, _ in seen]
            result = status["result"]
            assert result["previous"] == before["live_collection"]
            assert result["documents"] >= len(TOPICS) and result["failed"] == []

            # The new index is live: its model, its chunk size, the old collection dropped.
            after = await index_info(api)
            assert after["model"] == "openai:fake-embed-2" and after["chunk_tokens"] == 256
            assert after["keyword_tokenization_current"], after
            assert after["live_collection"] == result["collection"]
            assert [c["name"] for c in after["collections"]] == [result["collection"]]
            # Split again (the tests' CHUNK_TOKENS is 64): fewer, longer chunks than before.
            done_late = await api.wait_task(late_import["task_id"])
            assert done_late["status"] == "completed", done_late
            assert after["collections"][0]["points"] < old_points

            # Queries are embedded with the new model (48 dimensions: the old one's 32 would
            # fail against this collection) and find the new chunks exactly.
            new = await top_hit(api, "Forest note 5")
            new_text = new["text"]
            # (256-token chunks hold one paragraph of these, about 1.5 times a 64-token chunk.)
            assert len(new_text.split()) > 1.3 * len(old_text.split())
            hit = await top_hit(api, new_text)
            assert hit["score"] > 0.99 and hit["document_id"] == new["document_id"]
            assert new_text in fake.inputs_by_model["fake-embed-2"]

            # Every document, the one imported during the re-index too, is in the new index
            # with its re-chunked count, and its chunk files are the re-chunked ones.
            for doc_id in [d["id"] for d in docs.values()] + [late_import["document_id"]]:
                d = (await api.http.get(f"/v1/documents/{doc_id}")).json()
                assert d["points_in_index"] == d["indexed_chunks"] > 0, d
            audit = (await api.http.get("/v1/admin/audit", headers=api.admin)).json()
            assert any(a["action"] == "reindex" and a["actor"] == "alice" for a in audit)

            # A re-import after the switch is chunked and embedded the new way, in place.
            again = await api.upload(tmp_path / "river.txt")
            done = await api.wait_task(again["task_id"])
            assert done["status"] == "completed", done
            d = (await api.http.get(f"/v1/documents/{docs['river']['id']}")).json()
            assert d["points_in_index"] == d["indexed_chunks"] == done["result"]["total_chunks"]
            assert done["result"]["total_chunks"] < docs["river"]["chunks"]
    finally:
        fake.stop()


async def test_cancelled_reindex_leaves_the_live_index(settings: Settings, tmp_path: Path) -> None:
    fake = FakeOpenAI(models=("fake-embed", "fake-embed-2")).start()
    # A client timeout long enough that a held request is not given up and sent again.
    cfg = openai_settings(settings, fake, openai_timeout_seconds=120.0)
    try:
        async with running_api(cfg) as api:
            docs = await import_topics(api, tmp_path)
            before = await index_info(api)
            old = await top_hit(api, "Harbor note 2")
            # The re-index's embedding requests are answered until the first document it
            # rebuilds is embedded (and the new collection made), then wait at the fake's gate:
            # the cancel lands in the middle of a later rebuild, whatever the machine's speed.
            first = max(-(-d["chunks"] // cfg.embedding_batch_size) for d in docs.values())
            asked_before = fake.requests
            fake.hold = lambda kind, n: kind == "embeddings" and n > asked_before + first
            r = await api.http.post(
                "/v1/admin/reindex",
                headers=api.admin,
                json={"model": "openai:fake-embed-2", "concurrency": 1},
            )
            task_id = r.json()["task_id"]
            await eventually(
                partial(index_info, api),
                lambda info: len(info["collections"]) >= 2,
                timeout=WAIT,
                interval=0.1,
                what="the new collection",
            )
            await eventually(lambda: fake.held, bool, timeout=WAIT, what="a rebuild's request held")
            r = await api.http.post(
                f"/v1/admin/tasks/{task_id}/cancel", headers=api.admin, json={"reason": "test"}
            )
            assert r.status_code == 202, r.text
            status = await wait_admin_task(api, task_id)
            assert status["status"] == "cancelled", status
            # Cancelled while its request was still held: the cancel did not wait for the
            # model, and nothing was asked after it.
            assert (fake.held, fake.requests - asked_before) == (1, first + 1)
            fake.hold = None  # new requests (the search's query) go on; the held one waits
            # The half-built collection is gone; search still answers from the old index.
            assert await index_info(api) == before
            hit = await top_hit(api, old["text"])
            assert hit["score"] > 0.99 and hit["document_id"] == old["document_id"]
            fake.release()
            await eventually(lambda: fake.in_flight, lambda n: n == 0, what="the held answer")
    finally:
        fake.stop()


async def test_reindex_survives_a_worker_sigkill(settings: Settings, tmp_path: Path) -> None:
    """kill -9 of the worker in the middle of the rebuilds: a new worker finishes the same
    re-index; every chunk is in the new index exactly once and each text was paid for once
    (but the batch in flight)."""
    fake = FakeOpenAI(models=("fake-embed", "fake-embed-2")).start()
    cfg = openai_settings(settings, fake)
    log = tmp_path / "worker.log"
    first = start_worker_process(cfg, log)
    second = None
    try:
        async with running_env(cfg, worker=False) as env:
            chunks = 0
            for topic in TOPICS:
                (tmp_path / f"{topic}.txt").write_text(document(topic))
                ref = await env.documents.import_file(tmp_path / f"{topic}.txt")
                st = await env.service.wait(ref.task_id, timeout=WAIT)
                assert st.status == "completed", st.last_error
                chunks += st.result["total_chunks"]  # type: ignore[index]
            fake.latency = 0.5
            options = ReindexOptions(concurrency=1, grace_seconds=0)
            ref = await start_reindex(env.service, options, model="openai:fake-embed-2", actor="t")

            async def rebuilt() -> int:
                return (await env.service.get_status(ref.task_id)).progress.done

            try:
                await eventually(
                    rebuilt, lambda done: done >= 2, timeout=WAIT, interval=0.05, what="2 rebuilt"
                )
            except AssertionError as e:  # with the worker's log
                raise AssertionError(f"{e}\n{log.read_text()[-3000:]}") from None
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = start_worker_process(cfg, log)
            st = await env.service.wait(ref.task_id, timeout=WAIT)
            assert st.status == "completed", st.last_error
        assert stop_process(second) == 0
        store = open_index(cfg)
        try:
            live = await live_index(store, "openai:fake-embed")
            assert (live.model, live.collection) == ("openai:fake-embed-2", st.result["collection"])
            assert await store.count(live.collection, staged=True) == chunks
            assert await index_collections(store) == [live.collection]
        finally:
            store.close()
        billed = fake.inputs_by_model["fake-embed-2"]
        # Each text once, but the one batch the kill interrupted (a document's chunks).
        assert len(set(billed)) == chunks and len(billed) - chunks <= chunks // len(TOPICS) + 1
    finally:
        for p in (first, second):
            if p is not None:
                stop_process(p)
        fake.stop()
