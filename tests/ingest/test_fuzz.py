"""Fuzz every operation of the real app's OpenAPI schema (schemathesis) over real HTTP, with
valid and invalid inputs: no request may answer 5xx or break the connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, strategies
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from knowledgeops.config.settings import Settings
from tests.helpers.environment import ADMIN_TOKEN, running_api
from tests.helpers.http import app_routes

# Examples per operation and generation mode: bounds the run to under half a minute (the suite has
# 15 minutes on 2 cores; every route still gets positive and negative cases).
EXAMPLES = 12
# SSE routes stream until the task ends: only their status line is read.
READ_TIMEOUT = 10


def fuzz(base_url: str, headers: dict[str, str]) -> tuple[list[str], list[str]]:
    """Every operation of the served schema; returns (operations run, failures)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    session = requests.Session()
    ran: list[str] = []
    failures: list[str] = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):  # an operation the schema cannot describe: a failure
            failures.append(f"schema: {result.err()}")
            continue
        operation = result.ok()
        label = operation.label
        calls = 0
        strategy = strategies.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )

        @hypothesis.settings(
            max_examples=2 * EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def run(case: Any) -> None:
            nonlocal calls
            calls += 1
            try:
                # Sent by hand with stream=True: an SSE route answers its status at once and
                # then streams until the task ends, so only the status line is read.
                kwargs = case.as_transport_kwargs(base_url=base_url, headers=headers)
                response = session.request(**kwargs, stream=True, timeout=READ_TIMEOUT)
            except requests.RequestException as e:
                failures.append(
                    f"{case.operation.label}: {type(e).__name__}: {e} for {case.as_curl_command()}"
                )
                return
            status = response.status_code
            response.close()
            if status >= 500:
                failures.append(f"{case.operation.label}: {status} for {case.as_curl_command()}")

        run()
        assert calls > 0, f"{label}: no example was generated"
        ran.append(label)
    return ran, failures


async def test_openapi_fuzz_finds_no_server_error(settings: Settings) -> None:
    # One bearer token that is both an admin and an API token, so the fuzzer gets past
    # authentication on every route (its refusals are tested in test_access.py).
    async with running_api(settings, api_tokens=f"{ADMIN_TOKEN}:fuzzer") as api:
        base = str(api.http.base_url).rstrip("/")
        started = time.monotonic()
        ran, failures = await asyncio.to_thread(fuzz, base, api.admin)
        elapsed = time.monotonic() - started
        print(f"fuzzed {len(ran)} operations in {elapsed:.1f} s")
        assert (await api.http.get("/healthz")).status_code == 200  # the server is unharmed
    # Every route the application serves was fuzzed: one left out of the schema (and so out
    # of fuzzing) fails here, whoever adds it.
    served = {f"{method} {path}" for method, path in app_routes(settings, fill=None)}
    assert sorted(served - set(ran)) == []
    assert failures == [], "\n".join(failures[:20])
