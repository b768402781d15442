"""The air-gapped wheelhouse (tools/wheelhouse.sh, locked in tools/wheelhouse.txt) brings every
third-party package that the GPU steps import and the GPU machine's image (IMAGE in
tools/wheelhouse.sh) lacks, with and without --lean. The GPU steps are the runner, the kernel build
and each experiment with ``gpus >= 1``; what they import is read from the sources of their repro
modules' import closure, every import statement, those inside functions too."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from repro import layout
from repro.pipeline import provenance

from conftest import REPO

SCRIPT = REPO / "tools" / "wheelhouse.sh"
LOCK = REPO / "tools" / "wheelhouse.txt"
# What every GPU step runs besides its experiment's entry: the runner (`python -m repro.pipeline.run`)
# and, on the GPU machine (nvcc is there), the kernel build.
GPU_STEP_MODULES = ("repro.pipeline.run", "repro.kernels.build")
# import name -> distribution name, where they differ (others: the import name, canonicalised)
DISTRIBUTION = {"yaml": "pyyaml", "hydra": "hydra-core", "cupy": "cupy-cuda13x", "cupyx": "cupy-cuda13x",
                "cupy_backends": "cupy-cuda13x", "PIL": "pillow", "sklearn": "scikit-learn", "skimage": "scikit-image",
                "graphblas": "python-graphblas"}


def image_packages() -> set[str]:
    """The packages of the GPU machine's image: IMAGE="..." in tools/wheelhouse.sh."""
    found = re.search(r'^IMAGE="([^"]*)"', SCRIPT.read_text(), re.M)
    assert found, "no IMAGE=\"...\" in tools/wheelhouse.sh"
    return {canonicalize_name(n) for n in found.group(1).split()}


def lean_excluded() -> set[str]:
    """What --lean leaves out: the names in the script's `grep -Ev '^(a|b)=='`."""
    found = re.search(r"grep -Ev '\^\(([\w|-]+)\)=='", SCRIPT.read_text())
    assert found, "no --lean filter (grep -Ev '^(...)==') in tools/wheelhouse.sh"
    return {canonicalize_name(n) for n in found.group(1).split("|")}


def lock_pins(text: str) -> dict[str, str]:
    """name -> version of the lock's `name==version` lines."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def gpu_modules() -> list[str]:
    """The repro modules the GPU steps run: the import closures of GPU_STEP_MODULES and of the entry
    module of every experiment with gpus >= 1."""
    roots = list(GPU_STEP_MODULES)
    roots += [layout.experiment_file(e)["entry"].split(":")[0]
              for e in layout.experiment_names() if layout.gpus(e) >= 1]
    return sorted({m for root in roots for m in provenance.import_closure(root)})


def module_source(module: str) -> Path:
    base = layout.PACKAGE_ROOT.joinpath(*module.split(".")[1:])
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def third_party_imports(modules) -> dict[str, set[str]]:
    """distribution name -> the modules importing it: every absolute import of the modules' sources
    outside repro and the standard library."""
    found: dict[str, set[str]] = {}
    for module in modules:
        for node in ast.walk(ast.parse(module_source(module).read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top != "repro" and top not in sys.stdlib_module_names:
                    found.setdefault(canonicalize_name(DISTRIBUTION.get(top, top)), set()).add(module)
    return found


def uncovered(imports: dict[str, set[str]], provided: set[str]) -> list[str]:
    """The imported distributions that neither the image nor the wheelhouse provides, each with the
    modules importing it."""
    return [f"{name} (imported by {', '.join(sorted(mods))})" for name, mods in sorted(imports.items())
            if name not in provided]


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    return third_party_imports(gpu_modules())


def test_the_scan_sees_the_gpu_steps_imports(imports):
    # imports inside functions count (pyamg, pymetis and mtkahypar are imported where they are used)
    assert {"torch", "hydra-core", "omegaconf", "pyamg", "pymetis", "mtkahypar"} <= imports.keys()
    assert "repro.papers.gpucache.partition" in imports["pymetis"]


@pytest.mark.parametrize("lean", [False, True], ids=["full", "lean"])
def test_the_wheelhouse_and_the_image_cover_every_import_of_the_gpu_steps(imports, lean):
    lock = set(lock_pins(LOCK.read_text()))
    if lean:
        assert lean_excluded() == {"pulp", "pysz"}
        lock -= lean_excluded()
    missing = uncovered(imports, image_packages() | lock)
    assert not missing, ("the GPU steps import what neither the image nor tools/wheelhouse.txt has (add it to "
                         "ROOTS and containers/constraints.txt, then --relock): " + "; ".join(missing))


def test_a_package_missing_from_the_lock_is_named_with_its_importers(imports):
    lock = set(lock_pins(LOCK.read_text())) - {"pyamg"}
    problems = uncovered(imports, image_packages() | lock)
    assert len(problems) == 1 and problems[0].startswith("pyamg (imported by ")
    assert "repro.data.matrices" in problems[0]


def test_the_lock_keeps_pyprojects_pins():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    for name, version in lock_pins(LOCK.read_text()).items():
        if name in reqs:
            assert reqs[name].specifier.contains(version, prereleases=True), \
                f"tools/wheelhouse.txt: {name}=={version} is outside pyproject's {reqs[name]}"
    for name in ("pyamg", "pymetis", "mtkahypar"):
        assert f"{name}=={lock_pins(LOCK.read_text())[name]}" == str(reqs[name])


def steps_selection() -> set[str]:
    """What --steps keeps: the names of STEPS=(...) in tools/wheelhouse.sh."""
    found = re.search(r"^STEPS=\(([^)]*)\)", SCRIPT.read_text(), re.M)
    assert found, "no STEPS=(...) in tools/wheelhouse.sh"
    return {canonicalize_name(n) for n in found.group(1).split()}


def locked_closure(names: set[str], lock: set[str]) -> set[str]:
    """names and, transitively, their requirements (as installed here) that the lock pins: what a
    wheelhouse must hold for them to import on the GPU machine (whose image has the rest)."""
    from importlib import metadata

    todo, seen = [n for n in names if n in lock], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in map(Requirement, requires):
            dep = canonicalize_name(req.name)
            if dep in lock and (req.marker is None or req.marker.evaluate({"extra": ""})):
                todo.append(dep)
    return seen


def test_the_steps_selection_covers_the_gpu_steps_and_what_they_need(imports):
    lock = set(lock_pins(LOCK.read_text()))
    steps = steps_selection()
    assert steps <= lock, f"STEPS names what the lock does not pin: {sorted(steps - lock)}"
    missing = uncovered(imports, image_packages() | steps)
    assert not missing, "--steps leaves out what the GPU steps import: " + "; ".join(missing)
    needed = locked_closure(set(imports) & lock, lock)
    assert {"antlr4-python3-runtime", "hydra-core"} <= needed  # hydra-core's own requirement counts
    assert needed <= steps, f"--steps leaves out locked requirements: {sorted(needed - steps)}"
    assert "snakemake" not in steps
