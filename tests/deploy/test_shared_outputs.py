"""Task outputs, reports and map-reduce partial results with STORAGE_URL on a real S3-protocol
server (rclone on loopback): a task's output and a report are kept in the store, not in the
data folder, and another machine's API (a data folder of its own) serves them; partial results
are kept there too, and those an earlier version left under outputs/.work are still read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.map_reduce import Partial, WorkDir
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.files.outputs import OutputNotFoundError, OutputStore
from knowledgeops.registry.task_types import TaskType
from knowledgeops.reports.store import ReportFiles, ReportNotFoundError
from knowledgeops.storage.local import LocalStore
from knowledgeops.storage.opening import open_store
from knowledgeops.storage.store import Store
from tests.helpers.ai import WAIT, import_lesson
from tests.helpers.environment import running_api, running_env
from tests.helpers.s3_server import S3Server, rclone_s3

LOCAL_DIAGNOSIS = "local:key-terms+readability"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One server for the module; each test keeps to keys of its own."""
    with rclone_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


def bucket(server: S3Server, tmp_path: Path) -> Store:
    return open_store(server.url, tmp_path / "unused", server.env())


def files_under(folder: Path) -> list[str]:
    """Files (temp files included) under a folder of the data folder; [] if it is missing."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def machine_b(settings: Settings, tmp_path: Path) -> Settings:
    """Another machine: the same database, Temporal and store, a data folder of its own."""
    return settings.model_copy(update={"data_dir": tmp_path / "machine-b"})


async def test_task_output_is_kept_in_the_store_and_served_by_another_machine(
    settings: Settings, s3: S3Server, tmp_path: Path
) -> None:
    cfg = s3.settings(settings)
    async with running_env(cfg) as env:
        document_id = await import_lesson(env, tmp_path)
        # The chunk files are the store's: the diagnosis must fetch them.
        shutil.rmtree(cfg.chunks_dir)
        ref = await env.service.enqueue(
            TaskType.AI_ANALYSIS, {"document_id": document_id, "method": "local"}
        )
        st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    assert st.result is not None and st.result["method"] == LOCAL_DIAGNOSIS
    assert [p.suffix for p in sorted(cfg.chunks_dir.iterdir())] == [".idx", ".jsonl"], "fetched"
    # The output is in the store, its partial results are gone, and the data folder has none.
    assert f"outputs/{st.task_id}.json" in s3.keys("outputs")
    assert not [k for k in s3.keys("outputs") if k.startswith(f"outputs/work/{st.task_id}")]
    assert files_under(cfg.outputs_dir) == []
    stored = json.loads(await bucket(s3, tmp_path).get(f"outputs/{st.task_id}.json"))
    assert stored["task_id"] == st.task_id and stored["method"] == LOCAL_DIAGNOSIS
    assert stored["diagnosis"]["key_concepts"], stored

    async with running_api(machine_b(cfg, tmp_path), workers=False) as api:
        r = await api.http.get(f"/v1/tasks/{st.task_id}/output")
        assert r.status_code == 200, r.text
        assert r.json() == stored
        missing = await api.http.get("/v1/tasks/no-such-task/output")
        assert missing.status_code == 404, missing.text
        assert "no stored output" in missing.json()["detail"]
    assert files_under(tmp_path / "machine-b" / "outputs") == []


async def test_report_is_kept_in_the_store_and_served_by_another_machine(
    settings: Settings, s3: S3Server, tmp_path: Path
) -> None:
    # A prefix of its own: the module's other tests leave reports in the shared server.
    cfg = s3.settings(settings, storage_url=f"{s3.url}/report-test")
    async with running_env(cfg) as env:
        ref = await env.service.enqueue(
            TaskType.REPORT_GENERATE, {"period_days": 1, "title": "Shared"}
        )
        st = await env.service.wait(ref.task_id, timeout=WAIT)
    assert st.status == "completed", st.last_error
    result = st.result or {}
    report_id = result["report_id"]
    assert report_id == ref.task_id
    keys = [f"report-test/reports/{report_id}.html", f"report-test/reports/{report_id}.json"]
    assert s3.keys("report-test/reports") == keys, "the working files were not removed"
    assert files_under(cfg.reports_dir) == []
    assert result["html_path"].startswith(f"reports/{report_id}.html in s3://")
    store = open_store(cfg.storage_url, tmp_path / "unused", s3.env())
    html = await store.get(f"reports/{report_id}.html")
    data = await store.get(f"reports/{report_id}.json")
    assert json.loads(data)["title"] == "Shared" and b"<h1>Shared</h1>" in html
    assert result["json_url"] == f"/v1/reports/{report_id}.json"

    async with running_api(machine_b(cfg, tmp_path), workers=False) as api:
        listed = (await api.http.get("/v1/reports")).json()
        assert [(x["report_id"], x["title"]) for x in listed] == [(report_id, "Shared")]
        assert (listed[0]["html_bytes"], listed[0]["json_bytes"]) == (len(html), len(data))
        r = await api.http.get(f"/v1/reports/{report_id}.html")
        assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.content == html
        r = await api.http.get(f"/v1/reports/{report_id}.json")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.content == data
        for url in ("/v1/reports/nope.html", "/v1/reports/nope.json", "/v1/reports/work.json"):
            r = await api.http.get(url)
            assert r.status_code == 404 and r.json()["code"] == "not_found", url
    assert files_under(tmp_path / "machine-b" / "reports") == []


def partial(value: str, calls: int) -> Partial:
    return Partial(value=value, usage=TokenUsage(calls=calls))


async def test_partial_results_in_the_store_and_from_an_earlier_version(
    s3: S3Server, tmp_path: Path
) -> None:
    store = bucket(s3, tmp_path)
    outputs_dir = tmp_path / "data" / "outputs"
    work = WorkDir(store, outputs_dir, "map-task:1")
    await work.save(0, partial('{"n": 0}', 1))
    await work.save(1, partial('{"n": 1}', 2))
    prefix = "outputs/work/map-task:1"
    assert s3.keys(prefix) == [f"{prefix}/group-0.json", f"{prefix}/group-1.json"]
    assert await work.load(1) == partial('{"n": 1}', 2)
    assert await work.load(2) is None
    assert not outputs_dir.exists(), "nothing is written to the data folder"

    # A task in flight during the upgrade: its groups are where the earlier version put them.
    legacy = outputs_dir / ".work" / "map-task:1"
    legacy.mkdir(parents=True)
    (legacy / "group-2.json").write_text(partial('{"n": 2}', 3).model_dump_json())
    (legacy / "group-0.json").write_text(partial('{"old": true}', 9).model_dump_json())
    assert await work.load(2) == partial('{"n": 2}', 3)
    assert await work.load(0) == partial('{"n": 0}', 1), "the store's copy comes first"

    # Another task's groups are not touched by this one's discard.
    other = WorkDir(store, outputs_dir, "map-task:2")
    await other.save(0, partial("{}", 1))
    assert await work.discard() == 4
    assert s3.keys(prefix) == [] and not legacy.exists()
    assert [await work.load(i) for i in range(3)] == [None, None, None]
    assert s3.keys("outputs/work/map-task:2") == ["outputs/work/map-task:2/group-0.json"]
    assert await other.discard() == 1 and await other.discard() == 0

    with pytest.raises(OutputNotFoundError, match="is not a task id"):
        WorkDir(store, outputs_dir, "../escape")


async def test_partial_results_with_the_local_default_keep_to_the_data_folder(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    work = WorkDir(LocalStore(data_dir), data_dir / "outputs", "t1")
    await work.save(0, partial("{}", 1))
    assert files_under(data_dir) == ["outputs/work/t1/group-0.json"]
    legacy = data_dir / "outputs" / ".work" / "t1"
    legacy.mkdir(parents=True)
    (legacy / "group-1.json").write_text(partial('{"a": 1}', 2).model_dump_json())
    assert await work.load(1) == partial('{"a": 1}', 2)
    assert await work.discard() == 2
    # No empty folder per task left behind, as before the store.
    assert not (data_dir / "outputs" / "work" / "t1").exists() and not legacy.exists()


async def test_outputs_and_report_files_on_the_store(s3: S3Server, tmp_path: Path) -> None:
    store = bucket(s3, tmp_path)
    outputs = OutputStore(store)
    usage = TokenUsage(calls=7)
    assert await outputs.save("out-1", usage) == "out-1"
    assert "outputs/out-1.json" in s3.keys("outputs")
    assert await outputs.load("out-1") == usage.model_dump(mode="json")
    assert await outputs.delete("out-1") is True and await outputs.delete("out-1") is False
    with pytest.raises(OutputNotFoundError, match="task out-1 has no stored output"):
        await outputs.load("out-1")
    with pytest.raises(OutputNotFoundError, match="is not a task id"):
        await outputs.load("a/b")

    reports = ReportFiles(store, tmp_path / "data" / "reports")
    meta = {
        "title": "R",
        "generated_at": "2025-03-03T10:00:00Z",
        "since": "2025-03-02T10:00:00Z",
        "until": "2025-03-03T10:00:00Z",
    }
    await reports.work("rep-1").save("data.json", b"{}")
    with pytest.raises(ReportNotFoundError):
        await reports.read("rep-1", "html")
    await reports.publish("rep-1", b"<html></html>", json.dumps(meta).encode())
    assert await reports.read("rep-1", "html") == b"<html></html>"
    assert await reports.sizes("rep-1") == (13, len(json.dumps(meta)))
    # Working files and other keys under reports/ are no reports.
    await store.put("reports/stray.html", b"an HTML file without its JSON")
    [listed] = await reports.list()
    assert (listed.report_id, listed.title, listed.html_bytes) == ("rep-1", "R", 13)
    # A report being made when the upgrade came: its working files are read where they were.
    legacy = tmp_path / "data" / "reports" / ".work" / "rep-2"
    legacy.mkdir(parents=True)
    (legacy / "data.json").write_bytes(b'{"legacy": 1}')
    assert await reports.work("rep-2").load("data.json") == b'{"legacy": 1}'
    assert await reports.work("rep-2").load("tasks.svg") is None
    assert await reports.work("rep-2").discard() == 1 and not legacy.exists()
    assert await reports.work("rep-1").discard() == 1
    assert s3.keys("reports") == [
        "reports/rep-1.html",
        "reports/rep-1.json",
        "reports/stray.html",
    ]
