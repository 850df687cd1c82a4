"""Search as a user meets it: `GET /v1/search` over real HTTP on a running worker (the embedded
engine), its modes, its scope (owner and tags filtered inside the engine), bad queries, and
the optional reranker on the fake model server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowledgeops.config.settings import Settings
from tests.helpers.environment import Api, openai_settings, rerank_settings, running_api
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault

NOTES = {
    "aquifer.md": "# Groundwater\n\nRain soaks into the soil and recharges the aquifer below.\n",
    "rubisco.md": "# Photosynthesis\n\nThe enzyme RuBisCO fixes carbon dioxide in leaves.\n",
    "检索.md": "# 向量检索\n\n长文档需要切分成块，再分别计算向量，存入索引。\n",
}


async def _import(api: Api, tmp: Path, tags: dict[str, str]) -> dict[str, str]:
    ids = {}
    for name, text in NOTES.items():
        path = tmp / name
        path.write_text(text, encoding="utf-8")
        files = {"file": (name, path.read_bytes())}
        r = await api.http.post("/v1/documents", files=files, data={"tags": tags[name]})
        assert r.status_code == 202, r.text
        done = await api.wait_task(r.json()["task_id"])
        assert done["status"] == "completed", done
        ids[name] = r.json()["document_id"]
    return ids


async def _search(api: Api, **params: Any) -> list[dict[str, Any]]:
    r = await api.http.get("/v1/search", params=params)
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()
    return hits


async def test_modes_scope_and_bad_queries(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # The fake model's vectors are hashes of the text: the dense ranking means nothing here,
    # so what each mode adds is visible (keyword finds words, hybrid keeps keyword's best).
    cfg = openai_settings(settings, fake_openai)
    tags = {"aquifer.md": "geo,earth", "rubisco.md": "bio", "检索.md": "search,zh"}
    async with running_api(cfg) as api:
        ids = await _import(api, tmp_path, tags)
        kw = await _search(api, q="which enzyme fixes carbon?", mode="keyword", k=3)
        assert kw[0]["document_id"] == ids["rubisco.md"] and "RuBisCO" in kw[0]["text"]
        # Stemming: "recharging" finds "recharges".
        kw = await _search(api, q="recharging", mode="keyword")
        assert [h["document_id"] for h in kw] == [ids["aquifer.md"]]
        # Chinese is segmented: a word inside the sentence is found.
        kw = await _search(api, q="切分", mode="keyword")
        assert [h["document_id"] for h in kw] == [ids["检索.md"]]
        dense = await _search(api, q="anything at all", mode="dense", k=3)
        assert len(dense) == 3
        hybrid = await _search(api, q="RuBisCO enzyme", k=3)
        assert hybrid[0]["document_id"] == ids["rubisco.md"] and len(hybrid) == 3
        assert hybrid == await _search(api, q="RuBisCO enzyme", k=3, mode="hybrid")
        # Scope inside the engine: still k hits when k exist among the allowed documents.
        scoped = await _search(api, q="water", mode="dense", k=5, tags="earth")
        assert [h["document_id"] for h in scoped] == [ids["aquifer.md"]]
        scoped = await _search(api, q="carbon", mode="dense", k=5, document_id=ids["检索.md"])
        assert {h["document_id"] for h in scoped} == {ids["检索.md"]}
        # Bad queries: a 4xx that says what is wrong.
        r = await api.http.get("/v1/search", params={"q": "x", "mode": "fuzzy"})
        assert r.status_code == 422 and "hybrid" in r.text
        r = await api.http.get("/v1/search", params={"q": ""})
        assert r.status_code == 422
        r = await api.http.get("/v1/search", params={"q": "   "})
        assert r.status_code == 400 and "empty" in r.json()["detail"]
        r = await api.http.get("/v1/search", params={"q": "bad\x00query"})
        assert r.status_code == 400 and "control characters" in r.json()["detail"]
        r = await api.http.get("/v1/search", params={"q": "w" * 2001})
        assert r.status_code == 422
        r = await api.http.get("/v1/search", params={"q": "water", "k": 0})
        assert r.status_code == 422


async def test_reranker_orders_the_candidates_and_search_survives_its_failure(
    settings: Settings, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake = fake_openai
    # The reranker prefers the Chinese note whatever the query: its order must win.
    fake.rerank_script = lambda _q, docs: [1.0 if "向量" in d else 0.1 for d in docs]
    cfg = rerank_settings(openai_settings(settings, fake), fake, "/rerank")
    tags = dict.fromkeys(NOTES, "all")
    async with running_api(cfg) as api:
        ids = await _import(api, tmp_path, tags)
        plain = await _search(api, q="RuBisCO enzyme", mode="keyword", k=3)
        calls = fake.rerank_calls
        reranked = await _search(api, q="RuBisCO enzyme", k=2)
        assert fake.rerank_calls == calls + 1
        assert reranked[0]["document_id"] == ids["检索.md"] and reranked[0]["score"] == 1.0
        assert len(reranked) == 2
        # Every candidate went to the reranker, the fused list's first RERANK_CANDIDATES.
        assert len(fake.rerank_requests[-1]["texts"]) == 3
        # A reranker that fails: search still answers, in the index's own order.
        fake.rerank_faults.append(Fault(500))
        fallback = await _search(api, q="RuBisCO enzyme", k=2)
        assert fallback[0]["document_id"] == plain[0]["document_id"] == ids["rubisco.md"]
