"""`knowledgeops --version` and `--help` as a user runs them (no Temporal server, no settings):
the version, the task types `run` takes, the exit codes, and a help text for every argument."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from knowledgeops.registry.task_types import REGISTRY, TaskType
from starter.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "starter.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_version_is_the_installed_distributions() -> None:
    r = cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"knowledgeops {importlib.metadata.version('knowledgeops')}\n"


def test_run_help_names_every_task_type() -> None:
    r = cli("run", "--help")
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("task types (TYPE):", 1)[1]
    for t in TaskType:
        assert re.search(rf"^  {t.value}\s", listed, re.MULTILINE), t.value
    assert set(REGISTRY) == set(TaskType)  # so `run` takes every type


def test_top_level_help_documents_the_exit_codes() -> None:
    r = cli("--help")
    assert r.returncode == 0, r.stderr
    codes = r.stdout.split("\nexit codes:\n", 1)[1]
    for code in (0, 1, 2, 130):
        assert re.search(rf"^  {code}\s+\S", codes, re.MULTILINE), code
    # The epilog keeps its lines (RawDescriptionHelpFormatter): one row per code.
    assert "\n  2     invalid command line" in codes


def test_a_subcommand_documents_the_codes_it_adds() -> None:
    r = cli("reindex", "--help")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^  2\s+an invalid option value", r.stdout, re.MULTILINE)


def _parsers(
    parser: argparse.ArgumentParser, path: str = "knowledgeops"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_argument_and_subcommand_has_help() -> None:
    missing = []
    walked = list(_parsers(build_parser()))
    for path, parser in walked:
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not (action.help or "").strip():
                missing.append(f"{path}: {action.option_strings or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                # The listing's lines: one per subcommand, each one line.
                listed = {a.dest: a.help for a in action._choices_actions}
                assert set(listed) == set(action.choices), path
                for name, text in listed.items():
                    if not (text or "").strip() or "\n" in (text or ""):
                        missing.append(f"{path} {name}: its line in the listing")
    assert not missing, missing
    assert len(walked) > 20  # the walk reached the nested subcommands
