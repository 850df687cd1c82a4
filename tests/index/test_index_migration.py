"""An index made by the previous version (qdrant-client's local mode, `data/qdrant`) is moved
into the embedded engine when the worker starts, or by `knowledgeops index migrate`; until
then opening the index says which. The old folder is written here in local mode's own format
(meta.json, SQLite rows of pickled points), from a knowledge base imported for real."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from qdrant_client.http import models

from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from knowledgeops.index.live import LIVE_ALIAS
from knowledgeops.index.opening import IndexMigrationNeededError, open_index
from knowledgeops.index.vector_index import VectorIndex
from tests.helpers.environment import (
    EXAMPLES,
    ROOT,
    openai_settings,
    running_api,
    running_env,
    settings_env,
)
from tests.helpers.fake_openai import FakeOpenAI

# What the previous version's points carried (no owner, tags or heading context).
_OLD_FIELDS = {"document_id", "chunk_index", "text", "page", "heading", "h", "version", "staged"}


async def write_local_mode(
    index: VectorIndex, folder: Path, aliases: dict[str, str]
) -> dict[str, int]:
    """The index's collections as local mode kept them; points per collection."""

    async def export(name: str) -> list[models.PointStruct]:
        points, offset = [], None
        while True:
            page, offset = await index.export_points(name, offset, 256)
            points += [
                models.PointStruct(
                    id=str(p.id),
                    vector=p.vector,
                    payload={k: v for k, v in p.payload.items() if k in _OLD_FIELDS},
                )
                for p in page
            ]
            if offset is None:
                return points

    async def collect() -> dict[str, tuple[int, dict[str, object], list[models.PointStruct]]]:
        out = {}
        for name in await index.collections():
            dim, _ = await index.vector_params(name)
            out[name] = (dim, await index.metadata(name), await export(name))
        return out

    collections = await collect()
    meta: dict[str, object] = {"collections": {}, "aliases": aliases}
    for name, (dim, metadata, points) in collections.items():
        config: dict[str, object] = {"vectors": {"size": dim, "distance": "Cosine"}}
        if metadata:
            config["metadata"] = metadata
        meta["collections"][name] = config  # type: ignore[index]
        path = folder / "collection" / name
        path.mkdir(parents=True)
        db = sqlite3.connect(path / "storage.sqlite")
        db.execute("CREATE TABLE points (id TEXT PRIMARY KEY, point BLOB)")
        for p in points:
            key = base64.b64encode(pickle.dumps(p.id, protocol=4)).decode()
            db.execute("INSERT INTO points VALUES (?, ?)", (key, pickle.dumps(p)))
        db.commit()
        db.close()
    (folder / "meta.json").write_text(json.dumps(meta))
    return {name: len(c[2]) for name, c in collections.items()}


@pytest.fixture
def cfg(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return openai_settings(settings, fake_openai)


async def _knowledge_base(cfg: Settings) -> dict[str, str]:
    """Examples imported for real (one with an owner and tags); document ids by file name."""
    async with running_env(cfg) as env:
        refs = {}
        for p in sorted(EXAMPLES.iterdir()):
            meta = DocumentMetadata(owner="ann", tags=["bio"]) if "photo" in p.name else None
            refs[p.name] = await env.documents.import_file(p, metadata=meta)
        for ref in refs.values():
            st = await env.service.wait(ref.task_id, timeout=120)
            assert st.status == "completed", st.last_error
        return {name: ref.document_id for name, ref in refs.items()}


async def _to_local_mode(cfg: Settings) -> dict[str, int]:
    """Replace the new index with the same data in the previous version's folder."""
    index = open_index(cfg, build=False)
    try:
        counts = await write_local_mode(index, cfg.legacy_index_path, aliases={})
    finally:
        index.close()
    shutil.rmtree(cfg.index_path)
    return counts


async def test_the_worker_moves_an_earlier_index_in(cfg: Settings, fake_openai: FakeOpenAI) -> None:
    docs = await _knowledge_base(cfg)
    counts = await _to_local_mode(cfg)
    chunks = VectorIndex.collection_name("openai:fake-embed")
    assert counts[chunks] > 0 and counts["embeddings_openai-fake-embed"] > 0
    with pytest.raises(IndexMigrationNeededError, match="knowledgeops index migrate"):
        open_index(cfg)
    billed = fake_openai.embedded_count()
    async with running_api(cfg) as api:  # the worker process's resources migrate on open
        assert not cfg.legacy_index_path.exists()
        assert (cfg.legacy_index_path.parent / "qdrant.migrated").is_dir()
        info = (await api.http.get("/v1/admin/index", headers=api.admin)).json()
        assert {c["name"]: c["points"] for c in info["collections"]} == {chunks: counts[chunks]}
        # Keyword search works on migrated points (their BM25 vectors were made from the text,
        # by the current tokenization, which the collection records).
        assert info["keyword_tokenization_current"], info
        r = await api.http.get("/v1/search", params={"q": "RuBisCO", "mode": "keyword", "k": 1})
        assert [h["document_id"] for h in r.json()] == [docs["photosynthesis.html"]]
        # Owner and tags came from the catalogue onto the points: scoped search filters by them.
        r = await api.http.get("/v1/search", params={"q": "water light", "owner": "ann", "k": 10})
        assert {h["document_id"] for h in r.json()} == {docs["photosynthesis.html"]}
        r = await api.http.get("/v1/search", params={"q": "water light", "tags": "bio", "k": 10})
        assert {h["document_id"] for h in r.json()} == {docs["photosynthesis.html"]}
        # The embedding cache came along: re-importing a document pays nothing.
        path = EXAMPLES / "temporal-retries.md"
        r = await api.http.post(
            "/v1/documents",
            files={"file": (path.name, path.read_bytes())},
            data={"document_id": docs["temporal-retries.md"]},
        )
        assert r.status_code == 202, r.text
        done = await api.wait_task(r.json()["task_id"])
        assert done["status"] == "completed" and done["result"]["embedded"] == 0
        # Only the two hybrid searches' queries were embedded (a keyword search embeds none).
        assert fake_openai.embedded_count() == billed + 2


async def test_index_migrate_command(cfg: Settings) -> None:
    await _knowledge_base(cfg)
    counts = await _to_local_mode(cfg)

    def migrate() -> subprocess.CompletedProcess[str]:
        cli = [sys.executable, "-m", "starter.cli.main", "index", "migrate"]
        return subprocess.run(
            cli, cwd=ROOT, env=settings_env(cfg), capture_output=True, text=True, check=False
        )

    out = await asyncio.to_thread(migrate)
    assert out.returncode == 0, out.stderr
    assert f"{sum(counts.values())} points" in out.stdout
    again = await asyncio.to_thread(migrate)
    assert again.returncode == 0 and "nothing to migrate" in again.stdout
    index = open_index(cfg, build=False)
    try:
        for name, n in counts.items():
            assert await index.count(name, staged=True) == n
        assert await index.alias_target(LIVE_ALIAS) is None
    finally:
        index.close()
