"""Admission control: while the import backlog (bytes of files waiting for or in an import)
is over INGEST_BACKLOG_MAX_BYTES, uploads answer 429 with Retry-After and store nothing."""

from __future__ import annotations

from knowledgeops.config.settings import Settings
from tests.helpers.documents import upload
from tests.helpers.environment import EXAMPLES, running_api
from tests.helpers.waiting import eventually


async def test_uploads_are_refused_while_the_backlog_is_full(settings: Settings) -> None:
    first, second = EXAMPLES / "spaced-repetition.txt", EXAMPLES / "temporal-retries.md"
    limited = settings.model_copy(update={"ingest_backlog_max_bytes": first.stat().st_size + 1})
    async with running_api(limited, workers=False) as api:
        # No worker: the first import waits in the backlog, which is now full.
        r = await api.http.post("/v1/documents", **upload(first))
        assert r.status_code == 202, r.text
        queued = r.json()["task_id"]
        refused = await api.http.post("/v1/documents", **upload(second))
        assert refused.status_code == 429, refused.text
        assert refused.json()["code"] == "backlog_full"
        assert "INGEST_BACKLOG_MAX_BYTES" in refused.text and refused.headers["retry-after"]
        assert len(list(limited.files_dir.iterdir())) == 1, "a refused upload stores nothing"
    # Measured from Temporal too, not only counted in the process that admitted the first:
    # an API started afresh, which counted nothing, refuses it as well.
    async with running_api(limited, workers=False) as api:
        again = await api.http.post("/v1/documents", **upload(second))
        assert again.status_code == 429, again.text
    async with running_api(limited) as api:  # a worker drains the backlog
        assert (await api.wait_task(queued))["status"] == "completed"

        # Admitted again once Temporal's visibility no longer lists the import as running (it
        # settles eventually); until then a retry is refused (429), nothing else.
        async def retry() -> tuple[int, str]:
            r = await api.http.post("/v1/documents", **upload(second))
            assert r.status_code in (202, 429), r.text
            return r.status_code, r.text

        await eventually(
            retry,
            lambda r: r[0] == 202,
            timeout=30,
            interval=0.5,
            what="an upload admitted after the backlog drained",
        )
        # The refused retries stored nothing; the admitted one stored its file.
        assert len(list(limited.files_dir.iterdir())) == 2
