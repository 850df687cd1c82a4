"""The import direction: between the top-level parts (starter never imports activities or the
worker; workflows import nothing heavy), and between the core's packages (each imports only
packages of the layers below it, type-only imports included, so no cycle can form)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.environment import ROOT

CORE = ROOT / "knowledgeops"

# The core's packages (and root modules), lowest first. A package may import from the layers
# below its own, never from its own layer's other packages or from above. A new package must
# be placed here: the test fails for one it does not know.
LAYERS: list[set[str]] = [
    {"contracts"},
    {"errors", "storage", "process_guard", "turns"},
    {"formats", "registry"},
    {"config"},
    {"observability"},
    {"models", "files", "text"},
    {"db"},
    {"index"},
    {"ingest", "learning", "vision"},
    {"ocr", "documents", "reports", "backup"},
    {"runtime"},
    {"cleanup", "agent"},
]
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}

# What must never reach a workflow's sandbox: each is slow to import or has side effects that
# the sandbox would pass through into every workflow run.
HEAVY = {"numpy", "qdrant_edge", "qdrant_client", "sqlalchemy", "httpx", "openai"}


def _imported_after(statement: str) -> set[str]:
    """Top-level packages a fresh interpreter has loaded after `statement`."""
    names = "' '.join(sorted({m.split('.')[0] for m in sys.modules}))"
    code = f"import sys; {statement}; print({names})"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def _modules(folder: str) -> list[str]:
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / folder).rglob("*.py")
    )


def test_starter_never_imports_activities_or_the_worker() -> None:
    # Everything the starter starts goes by name through the registry.
    loaded = _imported_after("import " + ", ".join(_modules("starter")))
    assert not {"activities", "worker", "workflows"} & loaded


def test_workflow_modules_import_nothing_heavy() -> None:
    loaded = _imported_after("import " + ", ".join(_modules("workflows")))
    assert not (HEAVY | {"activities", "starter"}) & loaded


def test_the_workflow_check_sees_a_heavy_import() -> None:
    # The check above is only worth something if a heavy import would show.
    assert "numpy" in _imported_after("import knowledgeops.models.embedding")


def test_only_the_index_package_talks_to_an_engine() -> None:
    # One interface over both engines (Qdrant Edge embedded, a Qdrant server).
    for path in ROOT.glob("**/*.py"):
        rel = path.relative_to(ROOT).parts
        if rel[0] in {".venv", "tests", "bench"} or rel[:2] == ("knowledgeops", "index"):
            continue
        source = path.read_text(encoding="utf-8")
        assert "qdrant_client" not in source and "qdrant_edge" not in source, path


def _core_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "knowledgeops" or len(parts) < 2:
        return None
    return parts[1]


def _core_imports(path: Path) -> set[str]:
    """The core packages a module imports, anywhere in it (TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "knowledgeops":
                names = [f"knowledgeops.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {p for p in map(_core_part, names) if p is not None}
    return found


def _core_files() -> list[tuple[str, Path]]:
    files = []
    for path in CORE.rglob("*.py"):
        rel = path.relative_to(CORE).parts
        if rel == ("__init__.py",):
            continue
        files.append((rel[0].removesuffix(".py"), path))
    return files


def test_every_core_package_has_a_layer() -> None:
    assert {part for part, _ in _core_files()} <= set(RANK)


@pytest.mark.parametrize("part", sorted(RANK))
def test_core_package_imports_only_layers_below(part: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)} -> knowledgeops.{target}"
        for owner, path in _core_files()
        if owner == part
        for target in _core_imports(path) - {part}
        if RANK.get(target, len(LAYERS)) >= RANK[part]
    }
    assert not wrong, sorted(wrong)


def test_tests_share_only_through_helpers() -> None:
    # A test module imported by another runs its module-level code twice and couples two
    # files' fixtures; what tests share lives in tests/helpers/ (and fixtures in conftest.py).
    wrong = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("tests.") and not module.startswith("tests.helpers"):
                wrong.add(f"{path.relative_to(ROOT)} -> {module}")
    assert not wrong, sorted(wrong)
