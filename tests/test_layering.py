"""The import contracts (stock import-linter contracts in pyproject.toml, run by lint-imports): they
hold for the repository, name every top-level module of repro, and fail, naming the import, when a
paper imports another paper, the spine or a shared library imports a paper, a paper imports the
pipeline, or the pipeline imports the report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from repro import layout

from conftest import REPO


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_repository_keeps_the_contracts():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 kept, 0 broken" in proc.stdout


def test_every_top_level_module_has_a_layer():
    """A new spine module or package must be placed in a layer, or the contracts would not check it."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.replace("|", ":").split(":")}
    top = set(layout.spine_modules()) | set(layout.SHARED) | set(layout.APART) | {"papers"}
    assert top == named, f"only in the tree: {sorted(top - named)}; only in the contracts: {sorted(named - top)}"


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copytree(REPO / "src" / "repro", tmp_path / "src" / "repro", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("importer,imported", [
    ("papers/clicktrain/budget.py", "repro.papers.comet.codec"),  # a paper importing another paper
    ("records.py", "repro.papers.tsm2x.tuner"),  # the spine importing a paper
    ("train/arm.py", "repro.papers.baseline.reference_loop"),  # a shared library importing a paper
    ("papers/comet/codec.py", "repro.pipeline.run"),  # a paper importing the pipeline
    ("pipeline/reference.py", "repro.report.claims"),  # the pipeline importing the report
    ("report/claims.py", "repro.papers.comet.codec"),  # the report importing a paper
])
def test_a_forbidden_import_breaks_a_contract(copy, importer, imported):
    path = copy / "src" / "repro" / importer
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")
    proc = lint(copy)
    assert proc.returncode != 0 and "0 broken" not in proc.stdout, proc.stdout[-2000:]
    module = f"repro.{importer.removesuffix('.py').replace('/', '.')}"
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]  # forbidden contracts indent more
    assert f"- {module} -> {imported}" in {line.partition(" (l.")[0] for line in lines}, proc.stdout[-2000:]
    assert "is not allowed to import" in proc.stdout
