"""The OpenAI-compatible provider against a real local HTTP server: limits, retries, refusals."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from knowledgeops.errors import EmbeddingRejectedError, EmbeddingUnavailableError
from knowledgeops.models.embedding import (
    OPENAI_MAX_INPUTS,
    OPENAI_MAX_TOKENS,
    LocalEmbedder,
    OpenAIEmbedder,
    _retry_after_seconds,
    make_embedder,
    plan_batches,
    split_evenly,
)
from tests.helpers.environment import openai_settings
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.model_answers import Fault
from tests.helpers.waiting import eventually


def embedder(fake: FakeOpenAI, **kw: object) -> OpenAIEmbedder:
    args: dict[str, object] = {
        "model": "fake-embed",
        "api_key": fake.api_key,
        "base_url": fake.base_url,
        "timeout": 1.0,
        "max_retries": 3,
    }
    args.update(kw)
    return OpenAIEmbedder(**args)  # type: ignore[arg-type]


def test_batches_respect_input_and_token_limits() -> None:
    many = ["x"] * 5000
    assert [e - s for s, e in plan_batches(many, OPENAI_MAX_INPUTS, OPENAI_MAX_TOKENS)] == [
        2048,
        2048,
        904,
    ]
    big = ["y" * 100_000] * 7  # 100k tokens at most each: three fit under 300k
    assert plan_batches(big, OPENAI_MAX_INPUTS, OPENAI_MAX_TOKENS) == [(0, 3), (3, 6), (6, 7)]
    chinese = ["学" * 60_000] * 3  # 180 KB of UTF-8 each: bounded by bytes, one per request
    assert plan_batches(chinese, OPENAI_MAX_INPUTS, OPENAI_MAX_TOKENS) == [(0, 1), (1, 2), (2, 3)]


def test_retry_after_forms() -> None:
    assert _retry_after_seconds({"retry-after": "2"}) == 2.0
    assert _retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    http_date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 3))
    assert 1.0 < (_retry_after_seconds({"retry-after": http_date}) or 0) <= 3.0
    assert _retry_after_seconds({}) is None


async def test_vectors_come_back_in_input_order(fake_openai: FakeOpenAI) -> None:
    texts = [f"text {i}" for i in range(40)]
    vectors = await embedder(fake_openai, max_inputs=16).embed(texts)
    assert vectors == [pytest.approx(fake_openai.vector(t)) for t in texts]
    assert fake_openai.requests == 3  # 16 + 16 + 8


async def test_429_and_5xx_and_timeouts_are_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend(
        [Fault(429, retry_after=0.5), Fault(500), Fault(200, hang_seconds=2.0)]
    )
    waits = []

    async def on_wait() -> None:
        waits.append(time.monotonic())

    vectors = await embedder(fake_openai).embed(["a", "b"], on_wait)
    assert len(vectors) == 2 and len(waits) == 3
    assert fake_openai.requests == 4


async def test_gives_up_after_max_retries_as_retryable(fake_openai: FakeOpenAI) -> None:
    fake_openai.faults.extend([Fault(502)] * 3)
    with pytest.raises(EmbeddingUnavailableError, match="kept failing after 3 tries"):
        await embedder(fake_openai, max_retries=2).embed(["a"])


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"api_key": "wrong"}, "401: the API key was refused: check OPENAI_API_KEY"),
        ({"model": "no-such-model"}, "404: model 'no-such-model'"),
    ],
)
async def test_refusals_are_not_retried(fake_openai: FakeOpenAI, kw: dict, words: str) -> None:
    with pytest.raises(EmbeddingRejectedError, match=words):
        await embedder(fake_openai, **kw).embed(["a"])
    assert fake_openai.requests == 1


def test_provider_settings_are_checked(settings: Settings, fake_openai: FakeOpenAI) -> None:
    bad = settings.model_copy(update={"embedding_provider": "openai"})
    with pytest.raises(ValueError, match="needs OPENAI_API_KEY"):
        make_embedder(bad)
    with pytest.raises(ValueError, match="not available locally"):
        make_embedder(settings.model_copy(update={"embedding_model": "bge-m3"}))
    assert make_embedder(openai_settings(settings, fake_openai)).model_id == "openai:fake-embed"


async def test_local_model_serves_the_smallest_waiting_request_first() -> None:
    """A small document's one batch goes ahead of bulk imports' full batches (fair scheduling);
    a waiter cancelled in the queue never gets or blocks the model."""
    from knowledgeops.turns import SmallestFirst

    turn, order, arrived = SmallestFirst(), [], []
    go = asyncio.Event()  # bulk-0 holds the model until then, however slow the machine

    async def embed(
        name: str, texts: int, seconds: float, until: asyncio.Event | None = None
    ) -> None:
        # Nothing yields between this and taking the model or joining its queue: once
        # arrived, a request is in line.
        arrived.append(name)
        async with turn.hold(texts):
            order.append(name)
            await (until.wait() if until else asyncio.sleep(seconds))

    def in_line(*names: str) -> Awaitable[list[str]]:
        return eventually(
            lambda: arrived,
            lambda a: a[-len(names) :] == list(names),
            interval=0.01,
            what=f"{', '.join(names)} in line",
        )

    running = asyncio.create_task(embed("bulk-0", 64, 0, until=go))
    await in_line("bulk-0")
    bulk = [asyncio.create_task(embed(f"bulk-{i}", 64, 0.02)) for i in (1, 2)]
    await in_line("bulk-1", "bulk-2")
    gone = asyncio.create_task(embed("cancelled", 1, 0.02))
    await in_line("cancelled")
    gone.cancel()
    small = asyncio.create_task(embed("small", 3, 0.02))
    await in_line("small")
    go.set()
    await asyncio.gather(running, *bulk, small)
    assert order == ["bulk-0", "small", "bulk-1", "bulk-2"]
    # Free again: the next request does not wait.
    await asyncio.wait_for(embed("after", 64, 0), timeout=1)


def test_a_batch_splits_into_even_runs_in_order() -> None:
    texts = ["a" * 100] + ["b"] * 10
    assert split_evenly(texts, 2) == [["a" * 100], ["b"] * 10]
    runs = split_evenly([str(i) for i in range(10)], 4)
    assert [t for r in runs for t in r] == [str(i) for i in range(10)]
    assert {len(r) for r in runs} == {2, 3}
    assert split_evenly(["x", "y"], 4) == [["x"], ["y"]]
    assert split_evenly([], 2) == []


async def test_local_model_in_two_processes_embeds_as_one() -> None:
    """A batch split between two model processes comes back in input order, each vector the
    one a single process gives, and both processes did part of the work."""
    texts = [f"paragraph {i}: the water cycle moves water between sea and land." for i in range(9)]
    texts += ["为什么要把长文档切分成块？", "how does a retried activity resume?"]
    one, two = LocalEmbedder(1), LocalEmbedder(2)
    try:
        expected = await one.embed(texts)
        got = await two.embed(texts)
        # An executor starts its process on the first share given to it.
        pids = {pid for pool in two._executors() for pid in pool._processes}
    finally:
        await one.aclose()
        await two.aclose()
    assert len(got) == len(texts) and len(pids) == 2
    for a, b in zip(got, expected, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert got[0] != pytest.approx(got[1], abs=1e-3)


def test_local_model_process_dies_with_a_killed_worker(tmp_path: Path) -> None:
    """SIGKILL of the worker runs no cleanup; its model process (~120 MB) must not live on."""
    import signal
    import subprocess
    import sys

    import psutil

    script = (
        "import asyncio, sys\n"
        "from knowledgeops.models.embedding import LocalEmbedder\n"
        "async def main():\n"
        "    e = LocalEmbedder()\n"
        "    await e.embed(['hello'])\n"
        "    print('ready', flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n"
    )
    (tmp_path / "holder.py").write_text(script)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "holder.py")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        children = psutil.Process(proc.pid).children(recursive=True)
        model = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
        assert model, "the model runs in a child process"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"orphaned: {[c.cmdline() for c in alive]}"
    finally:
        proc.kill()
        proc.wait()
