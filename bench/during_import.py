"""What runs beside an import in bench.import_at_scale: one API search at a time, a one-page
upload every few seconds, and the submission of a document as a client would send it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.search_latency import percentiles
from knowledgeops.config.settings import Settings
from knowledgeops.contracts.document_import import DocumentMetadata
from starter.services.admission import BacklogFullError
from starter.services.document_models import ImportRef
from starter.services.documents import DocumentService
from starter.services.tasks import TaskQueueService

# A refused submission goes again this soon: the admission re-measures the backlog every 2 s,
# and a client waiting the advertised 30 s could leave the pipeline idle.
BACKLOG_RETRY_S = 1.0


async def submit(documents: DocumentService, path: Path, owner: str) -> tuple[ImportRef, int]:
    """Start a document's import as a client would: again while the backlog is full."""
    refused = 0
    while True:
        try:
            meta = DocumentMetadata(owner=owner)
            return await documents.import_file(path, metadata=meta), refused
        except BacklogFullError:
            refused += 1
            await asyncio.sleep(BACKLOG_RETRY_S)


@dataclass
class Searcher:
    """One API search at a time until stopped: latencies (ms) of the answered ones, errors."""

    settings: Settings
    texts: list[str]
    pause: float
    times: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    empty: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        base = f"http://127.0.0.1:{self.settings.api_port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            i = 0
            while not stop.is_set():
                q = self.texts[i % len(self.texts)]
                i += 1
                t = time.perf_counter()
                try:
                    r = await http.get("/v1/search", params={"q": q, "k": 10})
                    r.raise_for_status()
                except httpx.HTTPStatusError as e:
                    self.errors[f"HTTP {e.response.status_code}: {e.response.text[:120]}"] += 1
                except httpx.HTTPError as e:
                    self.errors[f"{type(e).__name__}: {e}"] += 1
                else:
                    self.times.append((time.perf_counter() - t) * 1000)
                    self.empty += not r.json()  # before the first publish: nothing to find
                await asyncio.sleep(self.pause)  # so the searcher does not take a core itself

    def summary(self) -> str:
        if not self.times:
            return f"no answered searches, {sum(self.errors.values())} errors"
        p50, p95 = percentiles(self.times)
        return f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(self.times):.0f} ms"


@dataclass
class OnePager:
    """A one-page note uploaded every `gap` seconds until stopped, each timed from its first
    submission (again while the backlog admission refuses it) to its import completed:
    fairness at this size (bench.fairness measures it beside a 50-document import)."""

    folder: Path
    gap: float
    times: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # per note: refusals before admission
    # Per completed note: its task id, when it was first submitted (epoch ns, as spans count),
    # and its seconds to completed.
    notes: list[tuple[str, int, float]] = field(default_factory=list)

    async def run(
        self, service: TaskQueueService, documents: DocumentService, stop: asyncio.Event
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        i = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.gap)
                return
            note = self.folder / f"note-{i:04d}.txt"
            note.write_text(f"Note {i}: a one-page note about review interval {i * 7} days.\n")
            i += 1
            started, started_ns = time.perf_counter(), time.time_ns()
            ref, refused = await submit(documents, note, "carol")
            self.refused.append(refused)
            status = await service.wait(ref.task_id, timeout=3600)
            if status.status != "completed":
                self.failed.append(f"{status.status}: {status.last_error}")
            else:
                self.times.append(time.perf_counter() - started)
                self.notes.append((ref.task_id, started_ns, self.times[-1]))

    def summary(self) -> str:
        if not self.times:
            return f"none completed during the import, {len(self.failed)} failed"
        p50, p95 = percentiles(self.times)
        return (
            f"{len(self.times)} completed, p50 {p50:.1f} s, p95 {p95:.1f} s, "
            f"max {max(self.times):.1f} s (target p95 < 10 s)"
            + (f"; {len(self.failed)} FAILED, first: {self.failed[0]}" if self.failed else "")
            + (
                f"; {sum(n > 0 for n in self.refused)} refused by the backlog admission first "
                f"(at most {max(self.refused)} times)"
                if any(self.refused)
                else ""
            )
        )
