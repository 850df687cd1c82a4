"""`knowledgeops import DIR` as a user runs it (a real CLI process) against the running API of a
real worker: one batch task for the folder, hidden files skipped, one progress line, the
failures listed, the exit code saying whether every document was imported."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from knowledgeops.config.settings import Settings
from tests.helpers.environment import ROOT, running_api, settings_env


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_a_folder_is_one_batch_with_a_progress_line(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "notes"
    for i in range(20):
        sub = root / f"topic-{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"n{i}.txt").write_text(f"Note {i}: the quokka{i} smiles at interval {i}.\n")
    (root / "empty.txt").write_bytes(b"")
    (root / ".DS_Store").write_bytes(b"\x00\x01binary")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    async with running_api(settings) as api:
        env = settings_env(api.settings)
        args = ["import", str(root), "--follow", "--owner", "ann", "--tags", "a,b"]
        r = await asyncio.to_thread(cli, args, env)
        assert r.returncode == 1, r.stderr  # one document failed
        [line, *_] = r.stdout.splitlines()
        task_id = line.split()[0]
        assert line.endswith("21 documents") and "document_batch_import-" in task_id
        assert "imported 20 of 21 documents, 1 failed" in r.stderr
        assert "failed: notes/empty.txt: EmptyDocument:" in r.stdout
        docs = (await api.http.get("/v1/documents", params={"limit": 100})).json()["items"]
        assert len(docs) == 21 and {d["owner"] for d in docs} == {"ann"}
        assert {d["tags"] == ["a", "b"] for d in docs} == {True}
        assert "notes/topic-1/n4.txt" in {d["filename"] for d in docs}

        # The same folder again, not followed: the batch, as JSON; it duplicates nothing.
        r = await asyncio.to_thread(cli, ["import", str(root), "--json", "--owner", "ann"], env)
        assert r.returncode == 0, r.stderr
        [again] = json.loads(r.stdout)
        assert again["total"] == 21
        done = await api.wait_task(again["task_id"])
        assert done["status"] == "completed" and done["result"]["imported"] == 20
        assert (await api.http.get("/v1/documents")).json()["total"] == 21

        # A title names one document: refused for a folder, nothing imported.
        r = await asyncio.to_thread(cli, ["import", str(root), "--title", "x"], env)
        assert r.returncode == 1 and "--title" in r.stderr
