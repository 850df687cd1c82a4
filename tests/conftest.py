"""Fixtures every test can ask for: one real Temporal dev server per session; per test a fresh
data directory (so a fresh embedded Qdrant), fresh task queues and, in the PostgreSQL pass, a
database of its own, as sdk-python's tests do. What they are built from is in tests/helpers/."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from knowledgeops.config.settings import Settings
from starter.dev_server import TemporalDevServer, free_port, local_dev_server
from tests.helpers.environment import Env, HermeticSettings, fresh_database, running_env
from tests.helpers.fake_openai import FakeOpenAI


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    with local_dev_server(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    async with fresh_database("ko_test") as url:
        yield url


@pytest.fixture
def settings(temporal_server: TemporalDevServer, tmp_path: Path, database_url: str) -> Settings:
    return HermeticSettings(
        DATABASE_URL=database_url,
        KNOWLEDGEOPS_DATA_DIR=tmp_path / "data",
        KNOWLEDGEOPS_PREFIX=f"t{uuid.uuid4().hex[:8]}-",
        TEMPORAL_ADDRESS=temporal_server.address,
        CHUNK_TOKENS=64,
        CHUNK_OVERLAP=8,
        API_PORT=free_port(),
        # Tests embed a few texts: one model process starts soonest (test_embedding runs two).
        LOCAL_EMBEDDING_PROCESSES=1,
    )


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[Env]:
    async with running_env(settings) as e:
        yield e
