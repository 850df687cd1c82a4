"""An optional reranker: a cross-encoder behind an HTTP rerank endpoint scores search's best
fused candidates against the query (Cohere, Jina, Hugging Face Text Embeddings Inference,
vLLM, Infinity...).

Two request bodies exist and no one body fits both: Cohere/Jina take
`{"model", "query", "documents", "top_n"}` and Cohere refuses any field it does not know;
TEI takes `{"query", "texts", ...}` and requires `texts`. `RERANK_API=auto` picks by the
URL: a path ending in `/v<N>/rerank` (api.cohere.com/v1|v2, api.jina.ai/v1, and the
`/v1/rerank` of vLLM, llama.cpp, LiteLLM) gets the Cohere/Jina body, any other (TEI's
`/rerank`) the TEI body; RERANK_API=cohere for a Cohere-style server on a bare `/rerank`
(Infinity). Both answers are understood whatever was sent:
`{"results": [{"index", "relevance_score"}]}` and `[{"index", "score"}]`.

One attempt per search, bounded by RERANK_TIMEOUT_SECONDS, no retries: a person is waiting,
and search can go on without reranking. Every failure is a `RerankError` that says what went
wrong and which setting to check; its `kind` tells a caller whether to fall back
(`unavailable`) or to report a configuration problem.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import httpx

from knowledgeops.config.settings import Settings

# Characters of each document sent. Chunks are CHUNK_TOKENS (512) tokens, about 2,000
# characters of English; many cross-encoders read 512 tokens of query + document and drop
# (or, at TEI without truncation, refuse) the rest. More would only make the request bigger
# and slower: an oversized chunk cannot make one search upload megabytes.
MAX_DOCUMENT_CHARS = 2_000
# Characters of a server's error text quoted in a RerankError.
_DETAIL_CHARS = 300

RerankApi = Literal["cohere", "tei"]
RerankErrorKind = Literal["credentials", "url", "rejected", "unavailable", "answer"]


class RerankError(Exception):
    """Reranking failed. `kind`: `credentials` (401/403), `url` (404, redirect), `rejected`
    (other 4xx), `unavailable` (5xx, 408, 429, timeout, no connection: search can go on
    without reranking), `answer` (a 200 that is no rerank result). `status`: the HTTP status,
    or None when there was no answer."""

    def __init__(self, message: str, kind: RerankErrorKind, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind: RerankErrorKind = kind
        self.status = status


def request_style(url: str, api: str = "auto") -> RerankApi:
    """The request body an endpoint takes: RERANK_API, or for `auto` by the URL's path."""
    if api in ("cohere", "tei"):
        return cast(RerankApi, api)
    path = urlsplit(url).path.rstrip("/")
    return "cohere" if re.search(r"/v\d+/rerank$", path) else "tei"


class Reranker:
    def __init__(
        self,
        url: str,
        *,
        model: str = "",
        api_key: str = "",
        timeout_seconds: float = 10.0,
        api: str = "auto",
        candidates: int = 30,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # Settings built in code skip the validators; httpx would call this "unavailable".
            raise ValueError(f"RERANK_URL={url[:100]!r} is not an http(s) URL with a host")
        self.url = url
        self.model = model
        self.style: RerankApi = request_style(url, api)
        # How many documents one call may carry (RERANK_CANDIDATES): what search sends.
        self.candidates = candidates
        self._timeout = timeout_seconds
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_seconds), follow_redirects=False
        )

    async def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document, in input order (higher: more relevant)."""
        if len(documents) > self.candidates:
            raise ValueError(
                f"{len(documents)} documents to rerank, more than RERANK_CANDIDATES "
                f"({self.candidates})"
            )
        if not documents:
            return []  # TEI answers 400 to an empty `texts`; nothing to ask anyway
        texts = [d[:MAX_DOCUMENT_CHARS] for d in documents]
        try:
            # The client's timeout bounds each read; this bounds the whole exchange (a server
            # that trickles its answer byte by byte).
            async with asyncio.timeout(self._timeout):
                resp = await self._client.post(self.url, json=self._body(query, texts))
        except (TimeoutError, httpx.TimeoutException):
            raise RerankError(
                f"the rerank provider is unavailable: no answer from {self.url} within "
                f"{self._timeout:g}s (RERANK_TIMEOUT_SECONDS); search goes on without "
                "reranking. Check the service at RERANK_URL, or raise RERANK_TIMEOUT_SECONDS",
                "unavailable",
            ) from None
        except httpx.TransportError as e:
            raise RerankError(
                f"the rerank provider is unavailable: cannot reach {self.url} "
                f"({type(e).__name__}: {e}); search goes on without reranking. Check that the "
                "service at RERANK_URL is running and reachable",
                "unavailable",
            ) from None
        if resp.status_code != 200:
            raise self._status_error(resp)
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._answer_error(f"not JSON: {resp.text[:_DETAIL_CHARS]!r}") from None
        return self._parse(data, len(texts))

    def _body(self, query: str, texts: list[str]) -> dict[str, Any]:
        if self.style == "tei":
            # truncate: a text longer than the model's window is cut, not refused (413/422).
            return {
                "query": query,
                "texts": texts,
                "truncate": True,
                "raw_scores": False,
                "return_text": False,
            }
        # Only fields Cohere knows (it refuses others); top_n = all: a score for every one.
        body: dict[str, Any] = {"query": query, "documents": texts, "top_n": len(texts)}
        if self.model:
            body["model"] = self.model
        return body

    def _status_error(self, resp: httpx.Response) -> RerankError:
        status = resp.status_code
        said = f"HTTP {status}: {_detail(resp)}"
        if status in (401, 403):
            return RerankError(
                f"the rerank provider at {self.url} refused the credentials ({said}); set "
                "RERANK_API_KEY to a key valid for it (sent as Authorization: Bearer)",
                "credentials",
                status,
            )
        if status == 404:
            return RerankError(
                f"no rerank endpoint or model at {self.url} ({said}); set RERANK_URL to the "
                "full endpoint URL (e.g. http://host:8080/rerank or "
                f"https://api.cohere.com/v2/rerank) and check RERANK_MODEL ({self.model!r})",
                "url",
                status,
            )
        if 300 <= status < 400:
            return RerankError(
                f"{self.url} answered with a redirect to {resp.headers.get('location')!r} "
                f"({said}); set RERANK_URL to the final endpoint URL",
                "url",
                status,
            )
        if status in (408, 429) or status >= 500:
            return RerankError(
                f"the rerank provider is unavailable ({said}); search goes on without "
                "reranking. Retry later, or check the service at RERANK_URL",
                "unavailable",
                status,
            )
        hint = (
            "lower RERANK_CANDIDATES (TEI refuses more texts than its --max-client-batch-size)"
            if status == 413
            else f"check RERANK_MODEL ({self.model!r}) and RERANK_API (this client sent the "
            f"{self.style} body; 'cohere' or 'tei' to change it)"
        )
        return RerankError(
            f"the rerank provider refused the request ({said}); {hint}", "rejected", status
        )

    def _answer_error(self, problem: str) -> RerankError:
        return RerankError(
            f"the answer from {self.url} is not a rerank result ({problem}); check that "
            "RERANK_URL is a rerank endpoint and RERANK_API matches it",
            "answer",
            200,
        )

    def _parse(self, data: Any, n: int) -> list[float]:
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            items: list[Any] = data["results"]  # Cohere / Jina
        elif isinstance(data, list):
            items = data  # TEI
        else:
            raise self._answer_error(
                'neither {"results": [...]} (Cohere/Jina) nor a list (TEI): '
                f"{json.dumps(data)[:_DETAIL_CHARS]}"
            )
        scores: list[float | None] = [None] * n
        for item in items:
            entry: dict[str, Any] = item if isinstance(item, dict) else {}
            index, score = entry.get("index"), entry.get("relevance_score", entry.get("score"))
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                raise self._answer_error(f"a result without a document index 0..{n - 1}: {item}")
            if not isinstance(score, int | float) or isinstance(score, bool):
                raise self._answer_error(f"a result without a numeric score: {item}")
            if not math.isfinite(score):
                raise self._answer_error(f"a score that is not a finite number: {item}")
            if scores[index] is not None:
                raise self._answer_error(f"document {index} scored twice")
            scores[index] = float(score)
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise self._answer_error(f"no score for document(s) {shown} of {n}")
        return [s for s in scores if s is not None]

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Reranker:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


def _detail(resp: httpx.Response) -> str:
    """The server's own words: Cohere `message`, TEI `error`, OpenAI-style `error.message`,
    FastAPI / Jina `detail`; else the start of the body."""
    try:
        data = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        for key in ("message", "error", "detail"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message", value)
            if value:
                text = value if isinstance(value, str) else json.dumps(value)
                return text[:_DETAIL_CHARS]
    return resp.text[:_DETAIL_CHARS] or resp.reason_phrase


def make_reranker(settings: Settings) -> Reranker | None:
    """The configured reranker, or None when RERANK_URL is empty (reranking off)."""
    if not settings.rerank_url:
        return None
    return Reranker(
        settings.rerank_url,
        model=settings.rerank_model,
        api_key=settings.rerank_api_key,
        timeout_seconds=settings.rerank_timeout_seconds,
        api=settings.rerank_api,
        candidates=settings.rerank_candidates,
    )
