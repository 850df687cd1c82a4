"""The quick figures for the working tree and an earlier commit, in one run, with their ratios:
what to run before resolving a change that touches the import or search path.

    .venv/bin/python -m bench.compare --against e48a3cc
    .venv/bin/python -m bench.compare --against HEAD~3 --only ingest_instant small_docs

The earlier commit is checked out into a temporary worktree (removed afterwards) and measured
with *this* tree's bench/ (and the embedding server the benchmarks run, INSTRUMENTS) copied
over its own, so both sides run the same measuring code and differ only in the product.
Figures alternate (earlier, working tree, earlier, ...) so a machine that drifts over minutes
weighs on both alike. A ratio is working tree / earlier for rates (above 1: faster now) and
earlier / working tree for latencies (the same reading).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT

# Measuring apparatus outside bench/: the OpenAI-compatible server the benchmarks embed with.
# An older copy would charge the earlier commit for the instrument's own delays (one had
# Nagle's algorithm on: ~40 ms a request, most of an API search's time then).
INSTRUMENTS = ("tests/helpers/fake_openai.py",)


@dataclass(frozen=True)
class Figure:
    name: str
    argv: tuple[str, ...]  # after `python -m`
    pattern: str  # its first group is the figure
    unit: str
    higher_is_better: bool = True


FIGURES = (
    Figure(
        "ingest_instant",
        ("bench.ingest", "--instant", "--docs", "8", "--paragraphs", "3000"),
        r"chunks through Temporal: [\d.]+ s, (\d+) chunks/s",
        "chunks/s",
    ),
    Figure(
        "small_docs",
        ("bench.small_docs", "--docs", "300"),
        r"([\d.]+) documents/s end to end",
        "documents/s",
    ),
    Figure(
        "search_p95",
        ("bench.search_latency", "--docs", "20", "--paragraphs", "370"),
        r"API hybrid: p50 [\d.]+ ms, p95 ([\d.]+) ms",
        "ms",
        higher_is_better=False,
    ),
    Figure(
        "large_vs_model",
        ("bench.ingest", "--large", "2"),
        r"import / raw model: ([\d.]+)",
        "× the raw model",
    ),
)


def measure(figure: Figure, tree: Path, log: Path) -> float | None:
    """One run of `figure` on the code in `tree`; None (and the output kept) if it failed."""
    env = dict(os.environ) | {"PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", *figure.argv],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    with log.open("a") as out:
        out.write(f"\n=== {figure.name} in {tree} (exit {done.returncode})\n")
        out.write(done.stdout + done.stderr)
    found = re.search(figure.pattern, done.stdout)
    return float(found.group(1)) if done.returncode == 0 and found else None


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """`commit` checked out in a temporary folder, with this tree's bench/ and INSTRUMENTS over
    its own."""
    folder = Path(tempfile.mkdtemp(prefix="ko-compare-"))
    path = folder / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
        check=True,
        capture_output=True,
    )
    try:
        shutil.rmtree(path / "bench")
        shutil.copytree(ROOT / "bench", path / "bench", ignore=shutil.ignore_patterns("results"))
        for name in INSTRUMENTS:
            shutil.copyfile(ROOT / name, path / name)
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
            check=True,
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def ratio(figure: Figure, earlier: float | None, now: float | None) -> str:
    if not earlier or not now:
        return "n/a"
    value = now / earlier if figure.higher_is_better else earlier / now
    return f"{value:.2f}"


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--against", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--only", nargs="+", choices=[f.name for f in FIGURES], help="these figures")
    ap.add_argument("--runs", type=int, default=1, help="runs per side (the median is shown)")
    ap.add_argument("--log", type=Path, default=Path("bench/results/compare.log"))
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.against],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    figures = [f for f in FIGURES if not args.only or f.name in args.only]
    args.log.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with worktree(commit) as earlier_tree:
        for figure in figures:
            earlier: list[float | None] = []
            now: list[float | None] = []
            for _ in range(args.runs):
                earlier.append(measure(figure, earlier_tree, args.log))
                now.append(measure(figure, ROOT, args.log))
                print(f"{figure.name}: {commit} {earlier[-1]}, working tree {now[-1]}", flush=True)
            rows.append((figure, median(earlier), median(now)))
    print(f"\n| figure | {commit} | working tree | ratio |\n|---|---|---|---|")
    for figure, old, new in rows:
        cells = ["failed" if v is None else f"{v:g} {figure.unit}" for v in (old, new)]
        print(f"| {figure.name} | {cells[0]} | {cells[1]} | {ratio(figure, old, new)} |")
    print(f"\n(ratios above 1: the working tree is better; outputs in {args.log})")


if __name__ == "__main__":
    main()
