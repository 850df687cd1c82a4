"""Shared pieces of the benchmarks: generated corpora, a Temporal dev server, a worker
subprocess whose memory is sampled. Everything on loopback, in temporary directories."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import psutil

from knowledgeops.config.settings import Settings
from starter.dev_server import TemporalDevServer, free_port, local_dev_server

ROOT = Path(__file__).resolve().parent.parent
_WORDS = (
    "learning memory review card spaced interval recall concept example exercise chapter "
    "theory practice model network signal energy cell protein market history river climate "
    "system process method result analysis data structure algorithm proof lemma equation"
).split()


def paragraph(rng: random.Random, n_words: int = 90) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    words[0] = words[0].capitalize()
    return " ".join(words) + "."


def write_corpus(folder: Path, docs: int, paragraphs: int, seed: int = 7) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for d in range(docs):
        p = folder / f"doc-{d:03d}.txt"
        p.write_text("\n\n".join(paragraph(rng) for _ in range(paragraphs)) + "\n")
        paths.append(p)
    return paths


def write_big_text(path: Path, megabytes: int, seed: int = 11) -> Path:
    rng = random.Random(seed)
    target = megabytes * 1024 * 1024
    with path.open("w") as f:
        size = 0
        while size < target:
            block = "\n\n".join(paragraph(rng) for _ in range(200)) + "\n\n"
            f.write(block)
            size += len(block)
    return path


def write_big_pdf(path: Path, pages: int, seed: int = 13) -> Path:
    from fpdf import FPDF

    rng = random.Random(seed)
    pdf = FPDF()
    pdf.set_font("helvetica", size=10)
    for _ in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, "\n\n".join(paragraph(rng, 60) for _ in range(5)))
    pdf.output(str(path))
    return path


def bench_settings(data_dir: Path, address: str, **extra: object) -> Settings:
    return Settings(
        KNOWLEDGEOPS_DATA_DIR=data_dir,
        TEMPORAL_ADDRESS=address,
        API_PORT=free_port(),
        **extra,  # type: ignore[arg-type]
    )


def env_for(settings: Settings) -> dict[str, str]:
    return dict(os.environ) | settings.to_env() | {"PYTHONUNBUFFERED": "1"}


@contextmanager
def temporal_server(workdir: Path) -> Iterator[TemporalDevServer]:
    with local_dev_server(workdir, db_file=workdir / "temporal.db") as server:
        yield server


class MemorySampler:
    """Peak RSS of a process and, separately, of its children: the parser subprocesses, the
    local embedding model's process and the index's process (INDEX_PROCESS), and of the
    process and its index's process together, sampled at the same moments."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak_parser = 0
        self.peak_embedder = 0
        self.peak_index = 0
        self.peak_with_index = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                own = self.proc.memory_info().rss
                index = 0
                for child in self.proc.children(recursive=True):
                    rss = child.memory_info().rss
                    command = " ".join(child.cmdline())
                    if "parser_process" in command:
                        self.peak_parser = max(self.peak_parser, rss)
                    elif "index.engine_process" in command:
                        index += rss
                    elif "edge_build_process" not in command:
                        self.peak_embedder = max(self.peak_embedder, rss)
                self.peak_index = max(self.peak_index, index)
                self.peak_with_index = max(self.peak_with_index, own + index)
            except psutil.Error:
                pass  # a child ended between listing and sampling
            time.sleep(self.interval)

    def peak_self(self) -> int:
        # VmHWM is the kernel's own high-water mark: exact, not sampled.
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def running_process(
    args: list[str], settings: Settings, log: Path, ready: str, timeout: float = 60.0
) -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours, configured by `settings`, once its log says `ready`; stopped after."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env_for(settings), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + timeout
        while ready not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker_process(
    settings: Settings, log: Path
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    return running_process([sys.executable, str(ROOT / "worker.py")], settings, log, "worker ready")


def mb(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MB"
