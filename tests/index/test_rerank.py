"""The reranker client against the fake server's rerank routes over real HTTP: both request
bodies and both answer shapes, credentials, and each kind of failure naming its setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from knowledgeops.config.settings import Settings
from knowledgeops.models.rerank import MAX_DOCUMENT_CHARS, Reranker, RerankError, make_reranker
from starter.dev_server import free_port
from tests.helpers.environment import HermeticSettings, rerank_settings
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault

QUERY = "temporal workflow retry"
# Fraction of the query's words in each: 0, 3/3, 1/3, 2/3 (the fake's default score).
DOCUMENTS = [
    "Nothing relevant here.",
    "A Temporal workflow retry policy.",
    "Each workflow has a history.",
    "Retry a Temporal activity.",
]
EXPECTED = [0.0, 1.0, 1 / 3, 2 / 3]


@pytest.fixture
def base(tmp_path: Path) -> Settings:
    return HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data")


def reranker(settings: Settings) -> Reranker:
    made = make_reranker(settings)
    assert made is not None
    return made


async def failure(settings: Settings, documents: list[str] = DOCUMENTS) -> RerankError:
    async with reranker(settings) as r:
        with pytest.raises(RerankError) as caught:
            await r.scores(QUERY, documents)
    return caught.value


@pytest.mark.parametrize("route", ["/rerank", "/v1/rerank", "/v2/rerank"])
async def test_scores_come_in_input_order_and_reorder_as_predicted(
    base: Settings, fake_openai: FakeOpenAI, route: str
) -> None:
    async with reranker(rerank_settings(base, fake_openai, route)) as r:
        scores = await r.scores(QUERY, DOCUMENTS)
    # The fake answers best first; the client puts every score back at its document.
    assert scores == pytest.approx(EXPECTED)
    assert sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i]) == [1, 3, 2, 0]
    assert fake_openai.rerank_calls == 1


async def test_tei_route_gets_the_tei_body_and_a_tei_answer(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    async with reranker(rerank_settings(base, fake_openai, "/rerank")) as r:
        assert r.style == "tei"
        await r.scores(QUERY, DOCUMENTS)
    body = fake_openai.rerank_requests[0]
    # TEI requires `texts`; truncate: a long text is cut by the server, not refused.
    assert body == {
        "query": QUERY,
        "texts": DOCUMENTS,
        "truncate": True,
        "raw_scores": False,
        "return_text": False,
    }


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
async def test_versioned_routes_get_the_cohere_body_and_a_cohere_answer(
    base: Settings, fake_openai: FakeOpenAI, route: str
) -> None:
    # top_n below would cut the Cohere answer short: the client must ask for every score.
    async with reranker(rerank_settings(base, fake_openai, route)) as r:
        assert r.style == "cohere"
        assert await r.scores(QUERY, DOCUMENTS) == pytest.approx(EXPECTED)
    body = fake_openai.rerank_requests[0]
    # Only fields Cohere knows: it answers 422 to any other.
    assert body == {
        "model": "fake-rerank",
        "query": QUERY,
        "documents": DOCUMENTS,
        "top_n": len(DOCUMENTS),
    }


async def test_rerank_api_names_the_body_for_a_server_off_the_usual_paths(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    # A vLLM / Infinity `/rerank`: Cohere-style body and answer on an unversioned path.
    fake_openai.rerank_shape = "cohere"
    settings = rerank_settings(base, fake_openai, "/rerank", rerank_api="cohere")
    async with reranker(settings) as r:
        assert await r.scores(QUERY, DOCUMENTS) == pytest.approx(EXPECTED)
    assert "documents" in fake_openai.rerank_requests[0]
    assert "texts" not in fake_openai.rerank_requests[0]
    # And the other way round: a TEI-style answer on a versioned path is read as well.
    fake_openai.rerank_shape = "tei"
    settings = rerank_settings(base, fake_openai, "/v1/rerank", rerank_api="tei")
    async with reranker(settings) as r:
        assert await r.scores(QUERY, DOCUMENTS) == pytest.approx(EXPECTED)
    assert "texts" in fake_openai.rerank_requests[1]


async def test_api_key_is_sent_as_bearer_and_none_without_one(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    async with reranker(rerank_settings(base, fake_openai)) as r:
        await r.scores(QUERY, DOCUMENTS)
    fake_openai.rerank_auth = False  # a TEI started without --api-key
    async with reranker(rerank_settings(base, fake_openai, rerank_api_key="")) as r:
        await r.scores(QUERY, DOCUMENTS)
    assert fake_openai.rerank_authorization == [f"Bearer {fake_openai.api_key}", None]


@pytest.mark.parametrize("route", ["/rerank", "/v2/rerank"])
async def test_refused_key_names_rerank_api_key(
    base: Settings, fake_openai: FakeOpenAI, route: str
) -> None:
    err = await failure(rerank_settings(base, fake_openai, route, rerank_api_key="wrong-key"))
    assert (err.kind, err.status) == ("credentials", 401)
    assert "RERANK_API_KEY" in err.message and "invalid api token" in err.message


async def test_forbidden_is_a_credentials_error(base: Settings, fake_openai: FakeOpenAI) -> None:
    fake_openai.rerank_faults.append(Fault(403))
    err = await failure(rerank_settings(base, fake_openai, "/v2/rerank"))
    assert (err.kind, err.status) == ("credentials", 403)
    assert "RERANK_API_KEY" in err.message


async def test_unknown_model_names_rerank_url_and_model(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    err = await failure(rerank_settings(base, fake_openai, "/v2/rerank", rerank_model="nope"))
    assert (err.kind, err.status) == ("url", 404)
    assert "RERANK_URL" in err.message and "RERANK_MODEL" in err.message
    assert "model 'nope' not found" in err.message  # the server's own words


async def test_other_refusals_name_what_to_check(base: Settings, fake_openai: FakeOpenAI) -> None:
    # Cohere v2 requires a model.
    err = await failure(rerank_settings(base, fake_openai, "/v2/rerank", rerank_model=""))
    assert (err.kind, err.status) == ("rejected", 400)
    assert "RERANK_MODEL" in err.message and "model is required" in err.message
    # TEI's answer to more texts than --max-client-batch-size.
    fake_openai.rerank_faults.append(Fault(413))
    err = await failure(rerank_settings(base, fake_openai, "/rerank"))
    assert (err.kind, err.status) == ("rejected", 413)
    assert "RERANK_CANDIDATES" in err.message


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_errors_mean_the_provider_is_unavailable(
    base: Settings, fake_openai: FakeOpenAI, status: int
) -> None:
    fake_openai.rerank_faults.append(Fault(status))
    err = await failure(rerank_settings(base, fake_openai, "/v1/rerank"))
    assert (err.kind, err.status) == ("unavailable", status)
    assert "unavailable" in err.message and "RERANK_URL" in err.message
    assert fake_openai.rerank_calls == 1  # one attempt: a person is waiting


async def test_a_hang_past_the_timeout_means_the_provider_is_unavailable(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    fake_openai.rerank_faults.append(Fault(hang_seconds=10))
    settings = rerank_settings(base, fake_openai, rerank_timeout_seconds=0.5)
    err = await failure(settings)
    # The timeout, not the server, ended the wait: the server is still on that request.
    assert fake_openai.in_flight == 1
    assert (err.kind, err.status) == ("unavailable", None)
    assert "unavailable" in err.message and "RERANK_TIMEOUT_SECONDS" in err.message


async def test_no_server_means_the_provider_is_unavailable(base: Settings) -> None:
    settings = base.model_copy(update={"rerank_url": f"http://127.0.0.1:{free_port()}/rerank"})
    err = await failure(settings)
    assert err.kind == "unavailable" and "RERANK_URL" in err.message


async def test_a_missing_score_is_an_error(base: Settings, fake_openai: FakeOpenAI) -> None:
    fake_openai.rerank_script = lambda query, documents: {0: 0.9, 2: 0.1}
    err = await failure(rerank_settings(base, fake_openai, "/v2/rerank"))
    assert err.kind == "answer"
    assert "no score for document(s) 1, 3 of 4" in err.message


async def test_a_score_for_an_unknown_document_is_an_error(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    fake_openai.rerank_script = lambda query, documents: [0.5] * (len(documents) + 1)
    err = await failure(rerank_settings(base, fake_openai, "/rerank"))
    assert err.kind == "answer" and "index 0..3" in err.message


async def test_long_documents_are_cut_and_none_sends_nothing(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    long = "retry " * 1000
    async with reranker(rerank_settings(base, fake_openai)) as r:
        assert await r.scores(QUERY, []) == []
        assert fake_openai.rerank_calls == 0
        assert len(await r.scores(QUERY, [long, "short"])) == 2
    assert [len(t) for t in fake_openai.rerank_requests[0]["texts"]] == [MAX_DOCUMENT_CHARS, 5]


async def test_more_documents_than_rerank_candidates_are_refused(
    base: Settings, fake_openai: FakeOpenAI
) -> None:
    async with reranker(rerank_settings(base, fake_openai, rerank_candidates=3)) as r:
        with pytest.raises(ValueError, match="RERANK_CANDIDATES"):
            await r.scores(QUERY, DOCUMENTS)
    assert fake_openai.rerank_calls == 0


def test_reranking_is_off_by_default(base: Settings) -> None:
    assert base.rerank_url == ""
    assert make_reranker(base) is None


def test_settings_configure_the_reranker(tmp_path: Path) -> None:
    s = HermeticSettings(
        KNOWLEDGEOPS_DATA_DIR=tmp_path / "data",
        RERANK_URL="https://api.cohere.com/v2/rerank",
        RERANK_MODEL="rerank-v3.5",
        RERANK_API_KEY="secret-key",
        RERANK_TIMEOUT_SECONDS=3,
        RERANK_CANDIDATES=20,
    )
    r = reranker(s)
    assert (r.url, r.model, r.style, r.candidates) == (
        "https://api.cohere.com/v2/rerank",
        "rerank-v3.5",
        "cohere",
        20,
    )
    assert reranker(s.model_copy(update={"rerank_url": "http://tei:8080/rerank"})).style == "tei"
    # The default candidates fit TEI's default --max-client-batch-size (32).
    assert HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path).rerank_candidates == 30


@pytest.mark.parametrize(
    "url", ["ftp://host/rerank", "localhost:8080/rerank", "http:///rerank", "api.cohere.com"]
)
def test_settings_reject_a_rerank_url_that_is_not_http(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValidationError, match="RERANK_URL") as caught:
        HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data", RERANK_URL=url)
    assert "not an http(s) URL" in str(caught.value)
    # Settings built in code skip validators; the client refuses such a URL itself.
    with pytest.raises(ValueError, match="RERANK_URL"):
        Reranker(url)


@pytest.mark.parametrize(
    "setting",
    [
        {"RERANK_CANDIDATES": 0},
        {"RERANK_CANDIDATES": 101},
        {"RERANK_TIMEOUT_SECONDS": 0},
        {"RERANK_API": "openai"},
        {"RERANK_API_KEY": "key with space"},
        {"RERANK_API_KEY": "key\n"},
    ],
)
def test_settings_reject_unusable_rerank_values(tmp_path: Path, setting: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match=next(iter(setting))):
        HermeticSettings(KNOWLEDGEOPS_DATA_DIR=tmp_path / "data", **setting)
