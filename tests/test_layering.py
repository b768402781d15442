"""The import contract (repro.layering, run by lint-imports from pyproject.toml): it holds for the
repository, and it fails, naming the import, when a paper imports another paper or the spine imports
a paper."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_repository_keeps_the_contract():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 kept, 0 broken" in proc.stdout


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copytree(REPO / "src" / "repro", tmp_path / "src" / "repro", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("importer,imported", [
    ("clicktrain/budget.py", "repro.comet.codec"),  # a paper importing another paper
    ("claims.py", "repro.tsm2x.tuner"),  # the spine importing a paper
    ("train/arm.py", "repro.baseline.reference_loop"),  # a shared library importing a paper
])
def test_a_forbidden_import_breaks_it(copy, importer, imported):
    path = copy / "src" / "repro" / importer
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")
    proc = lint(copy)
    assert proc.returncode != 0 and "1 broken" in proc.stdout
    module = f"repro.{importer.removesuffix('.py').replace('/', '.')}"
    assert f"- {module} -> {imported} (l." in proc.stdout and "is not allowed to import" in proc.stdout
