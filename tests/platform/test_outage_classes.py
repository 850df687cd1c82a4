"""Which failures are outages (waited out, knowledgeops/runtime/outages.py) and which are not:
each service's real client against a port where nothing listens names its service; a bad
request to a service that does answer is no outage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from knowledgeops.runtime.outages import unreachable_service
from knowledgeops.storage.s3 import S3Store
from starter.dev_server import free_port
from tests.helpers.s3_server import rclone_s3


def closed_port() -> int:
    return free_port()  # free: nothing listens there


async def failure_of(probe: object) -> BaseException:
    try:
        if asyncio.iscoroutine(probe):
            await probe
        else:
            assert callable(probe)
            probe()
    except Exception as e:
        return e
    raise AssertionError("the call succeeded; expected a failure")


async def test_a_database_that_does_not_answer_is_an_outage_and_a_bad_statement_is_not(
    tmp_path: Path,
) -> None:
    down = create_async_engine(f"postgresql+asyncpg://u:p@127.0.0.1:{closed_port()}/db")
    local = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")

    async def select(engine: AsyncEngine, sql: str) -> None:
        async with engine.connect() as c:
            await c.execute(text(sql))

    try:
        assert unreachable_service(await failure_of(select(down, "SELECT 1"))) == "database"
        bad = await failure_of(select(local, "SELECT * FROM no_such_table"))
        assert unreachable_service(bad) is None, bad
    finally:
        await down.dispose()
        await local.dispose()


async def test_an_object_store_that_does_not_answer_is_an_outage_and_a_missing_key_is_not(
    tmp_path: Path,
) -> None:
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    down = S3Store("s3://bucket/prefix", env=env)
    assert unreachable_service(await failure_of(down.get("some/key"))) == "object store"
    with rclone_s3(tmp_path / "s3") as s3:
        up = S3Store(s3.url, env=s3.env())
        missing = await failure_of(up.get("no/such/key"))
        assert unreachable_service(missing) is None, missing


async def test_a_qdrant_server_that_does_not_answer_is_an_outage() -> None:
    client = QdrantClient(
        url=f"http://127.0.0.1:{closed_port()}", timeout=2, check_compatibility=False
    )
    try:
        failure = await failure_of(client.get_collections)
        assert unreachable_service(failure) == "Qdrant server", repr(failure)
    finally:
        client.close()


@pytest.mark.parametrize("error", [ValueError("bad chunk"), ConnectionResetError("who?")])
def test_an_error_no_service_client_raised_is_no_outage(error: Exception) -> None:
    try:
        raise error  # raised here, in no driver's code: nothing says which service it was
    except Exception as e:
        assert unreachable_service(e) is None
