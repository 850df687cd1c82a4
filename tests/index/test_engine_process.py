"""The embedded engine in a child process (INDEX_PROCESS): what the index contract
(test_vector_index.py, its "edge-process" runs) does not show. A killed child is replaced and
nothing written is lost; an index held elsewhere says so; closing leaves no process; a worker
imports and searches through real HTTP with the index in its child (the default) or in
itself. Real processes, the real engine."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.search import SearchMode
from knowledgeops.files.chunk_store import Chunk
from knowledgeops.index.edge import EdgeEngine
from knowledgeops.index.engine import IndexLockedError
from knowledgeops.index.engine_client import EngineClient, IndexProcessError
from knowledgeops.index.vector_index import VectorIndex
from tests.helpers.environment import openai_settings, running_api
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.vectors import vec


def _chunks(n: int) -> list[Chunk]:
    return [Chunk(i, f"text {i}", f"h{i}", page=None, heading=None) for i in range(n)]


def _child_pid(client: EngineClient) -> int:
    assert client._child is not None
    return client._child.pid


async def test_a_killed_index_process_is_replaced_and_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    client = EngineClient(tmp_path / "index")
    index = VectorIndex(client)
    try:
        await index.upsert("chunks_x", "d", _chunks(40), [vec(i) for i in range(40)], version="v")
        assert client.count("chunks_x", None) == 40  # this thread's connection to the child
        first = _child_pid(client)
        os.kill(first, signal.SIGKILL)
        assert client._child is not None
        client._child.wait()
        # A call on a connection to the dead child fails, saying what happened and what
        # follows; the next one starts a new child over the same folder.
        with pytest.raises(IndexProcessError, match=r"stopped during count.*starts a new one"):
            client.count("chunks_x", None)
        assert client.count("chunks_x", None) == 40
        assert _child_pid(client) != first
        # The index's own threads reach the new child too.
        assert await index.count("chunks_x", "d") == 40
        hits = await index.search("chunks_x", 3, vector=vec(7), mode=SearchMode.DENSE)
        assert hits[0].text == "text 7"
    finally:
        index.close()
    assert client._child is None


async def test_an_index_held_by_another_process_says_so(tmp_path: Path) -> None:
    held = EdgeEngine(tmp_path / "index")
    try:
        with pytest.raises(IndexLockedError, match="held by another process"):
            EngineClient(tmp_path / "index")
    finally:
        held.close()


def test_closing_ends_the_child_and_frees_the_index(tmp_path: Path) -> None:
    client = EngineClient(tmp_path / "index")
    child = client._child
    assert child is not None and child.poll() is None
    client.close()
    assert child.poll() == 0
    # The folder is free again: the engine opens in this process.
    EdgeEngine(tmp_path / "index").close()
    with pytest.raises(IndexProcessError, match="closed"):
        client.count("chunks_x", None)


@pytest.mark.parametrize("in_process", [True, False], ids=["index-process", "in-worker"])
async def test_a_worker_imports_and_searches_with_the_index_where_told(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path, in_process: bool
) -> None:
    cfg = openai_settings(settings, fake_openai, index_process=in_process)
    note = tmp_path / "rubisco.md"
    note.write_text("# Photosynthesis\n\nThe enzyme RuBisCO fixes carbon dioxide in leaves.\n")
    async with running_api(cfg) as api:
        r = await api.http.post("/v1/documents", files={"file": (note.name, note.read_bytes())})
        assert r.status_code == 202, r.text
        document_id = r.json()["document_id"]
        done = await api.wait_task(r.json()["task_id"])
        assert done["status"] == "completed", done
        r = await api.http.get("/v1/search", params={"q": "which enzyme fixes carbon", "k": 1})
        assert r.status_code == 200, r.text
        [hit] = r.json()
        assert hit["document_id"] == document_id and "RuBisCO" in hit["text"]
        children = [p for p in os.listdir("/proc") if p.isdigit() and _is_engine_child(int(p), cfg)]
        assert bool(children) == in_process, children


def _is_engine_child(pid: int, settings: Settings) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"knowledgeops.index.engine_process" in cmd and str(settings.index_path).encode() in cmd
