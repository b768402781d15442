"""Deployment files agree with pyproject.toml: the container recipes (containers/), their shared
pins (containers/constraints.txt), the air-gapped wheelhouse lock (tools/wheelhouse*.txt) and the
Snakemake profiles (profiles/). Each checker returns its problems, so the negative tests
below show that it can fail."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO

CONTAINERS = REPO / "containers"
DEFS = {"cpu": CONTAINERS / "cpu.def", "gpu": CONTAINERS / "gpu.def"}
DOCKERFILE = CONTAINERS / "Dockerfile"
PROFILES = REPO / "profiles"
PIPELINE = ("snakemake", "hydra-core", "omegaconf", "mlflow")


def project_requirements(pyproject: str) -> dict[str, Requirement]:
    """name -> requirement, over the dependencies and every optional extra."""
    project = tomllib.loads(pyproject)["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {canonicalize_name(r.name): r for r in map(Requirement, reqs)}


def pins(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line (comments and options skipped)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version.strip()
    return out


def pin_problems(pyproject: str, constraints: str) -> list[str]:
    reqs, pinned = project_requirements(pyproject), pins(constraints)
    problems = [f"{name} is not pinned in constraints.txt" for name in PIPELINE if name not in pinned]
    for name, version in pinned.items():
        if name in reqs and not reqs[name].specifier.contains(version, prereleases=True):
            problems.append(f"{name}=={version} is outside pyproject's {name}{reqs[name].specifier}")
    return problems


def def_problems(text: str) -> list[str]:
    """An Apptainer definition: Bootstrap and From headers, the sections that matter, non-empty."""
    problems = []
    if not re.search(r"^Bootstrap:\s*docker\s*$", text, re.M):
        problems.append("no 'Bootstrap: docker' header")
    if not re.search(r"^From:\s*\S+", text, re.M):
        problems.append("no 'From:' header")
    sections = dict(re.findall(r"^%(\w+)\s*\n((?:(?!^%).*\n?)*)", text, re.M))
    for name in ("post", "environment"):
        if not sections.get(name, "").strip():
            problems.append(f"no %{name} section (or it is empty)")
    if not (sections.get("runscript", "").strip() or sections.get("labels", "").strip()):
        problems.append("neither %runscript nor %labels")
    return problems


def torch_pin(text: str) -> tuple[str, str]:
    """(version, index URL) of the recipe's one torch install."""
    found = re.findall(r"--index-url (\S+) torch==(\S+)", text)
    assert len(found) == 1, f"expected one 'pip install --index-url URL torch==X', found {found}"
    return found[0][1], found[0][0]


def container_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in (*DEFS.values(), DOCKERFILE)}


def test_constraints_agree_with_pyproject():
    assert pin_problems((REPO / "pyproject.toml").read_text(), (CONTAINERS / "constraints.txt").read_text()) == []


@pytest.mark.parametrize("change, expected", [
    (("snakemake==9.27.1", "snakemake==9.27.0"), "snakemake==9.27.0 is outside"),
    (("omegaconf==2.3.1", "omegaconf==2.4.0"), "omegaconf==2.4.0 is outside"),
    (("mlflow==3.17.2", ""), "mlflow is not pinned"),
], ids=["snakemake-moved", "omegaconf-out-of-range", "mlflow-unpinned"])
def test_pin_check_catches_drift(change, expected):
    constraints = (CONTAINERS / "constraints.txt").read_text()
    assert change[0] in constraints
    problems = pin_problems((REPO / "pyproject.toml").read_text(), constraints.replace(*change))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("name", sorted(container_texts()))
def test_recipe_installs_project_with_the_shared_constraints(name):
    text = container_texts()[name]
    assert re.search(r"pip install -c /opt/repro/containers/constraints\.txt \"?/opt/repro(\[gpu\])?\"?", text)
    # no recipe pins a pipeline package itself: constraints.txt is the one place
    for pkg in PIPELINE:
        assert not re.search(rf"\b{pkg}\s*[=<>~!]=", text), f"{name} pins {pkg} itself"


@pytest.mark.parametrize("name", sorted(container_texts()))
def test_torch_in_recipes_lies_in_pyproject_range(name):
    version, _ = torch_pin(container_texts()[name])
    torch = project_requirements((REPO / "pyproject.toml").read_text())["torch"]
    assert torch.specifier.contains(version), f"{name}: torch {version} outside {torch.specifier}"


def test_cpu_and_gpu_environments():
    texts = container_texts()
    assert torch_pin(texts["cpu.def"]) == ("2.13.0", "https://download.pytorch.org/whl/cpu")
    assert re.search(r"^From:\s*python:3\.11-", texts["cpu.def"], re.M)
    gpu_base = re.search(r"^From:\s*(\S+)", texts["gpu.def"], re.M).group(1)
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04", gpu_base)  # nvcc; Python 3.12
    # the Dockerfile is the same GPU environment
    assert re.search(r"^FROM (\S+)", texts["Dockerfile"], re.M).group(1) == gpu_base
    assert torch_pin(texts["Dockerfile"]) == torch_pin(texts["gpu.def"])
    assert torch_pin(texts["gpu.def"])[1].endswith("/cu130")
    for name in ("gpu.def", "Dockerfile"):
        assert '"/opt/repro[gpu]"' in texts[name]


# ids are file names: a test id "gpu" would make conftest skip it as GPU-only
@pytest.mark.parametrize("path", sorted(DEFS.values()), ids=lambda p: p.name)
def test_def_has_required_sections(path):
    assert def_problems(path.read_text()) == []


def test_def_check_catches_a_missing_section():
    text = DEFS["cpu"].read_text()
    broken = re.sub(r"^%environment\s*\n((?:(?!^%).*\n?)*)", "", text, flags=re.M)
    assert broken != text
    assert def_problems(broken) == ["no %environment section (or it is empty)"]
    assert "no 'From:' header" in def_problems(text.replace("From:", "Form:"))


def test_recipe_sources_exist():
    """Every file a recipe copies in (paths relative to the repository root) is there."""
    for kind, path in DEFS.items():
        files = re.search(r"^%files\s*\n((?:(?!^%).*\n?)*)", path.read_text(), re.M).group(1)
        for line in filter(None, map(str.strip, files.splitlines())):
            assert (REPO / line.split()[0]).exists(), f"{path.name}: {line.split()[0]} missing"
    for line in re.findall(r"^COPY (.+)$", DOCKERFILE.read_text(), re.M):
        for src in line.split()[:-1]:
            assert (REPO / src).exists(), f"Dockerfile: {src} missing"


def test_wheelhouse_lock_matches_constraints():
    pinned = pins((CONTAINERS / "constraints.txt").read_text())
    base = pins((REPO / "tools" / "wheelhouse.txt").read_text())
    extra = pins((REPO / "tools" / "wheelhouse-mlflow.txt").read_text())
    for name in ("snakemake", "hydra-core", "omegaconf", "antlr4-python3-runtime"):
        assert base.get(name) == pinned[name], f"tools/wheelhouse.txt: {name} {base.get(name)} != {pinned[name]}"
    assert extra.get("mlflow") == pinned["mlflow"]
    assert not base.keys() & extra.keys(), "a package is in both lock files"


def workflow_rules():
    from snakemake.api import ConfigSettings, OutputSettings, ResourceSettings, SnakemakeApi

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(config={}),
                          snakefile=REPO / "Snakefile", workdir=REPO)
        return list(wf._workflow.rules)


def test_rule_images_have_recipes():
    """`container: containers/repro-<kind>.sif` is built from containers/<kind>.def; GPU rules use gpu."""
    for rule in workflow_rules():
        if rule.container_img is None:
            continue
        kind = re.fullmatch(r"containers/repro-(\w+)\.sif", rule.container_img).group(1)
        assert kind in DEFS, f"rule {rule.name}: no containers/{kind}.def for {rule.container_img}"
        if "gpu" in rule.resources:
            assert kind == "gpu", f"rule {rule.name} needs a GPU but runs in {rule.container_img}"


def load_profile(name: str) -> dict:
    import yte

    with open(PROFILES / name / "config.yaml") as f:
        return yte.process_yaml(f, require_use_yte=True)


@pytest.mark.parametrize("name", ["default", "slurm"])
def test_profile_keys_are_snakemake_options(name):
    from snakemake.cli import get_argument_parser

    options = get_argument_parser()._option_string_actions
    unknown = [key for key in load_profile(name) if f"--{key}" not in options]
    assert unknown == [], f"not options of this Snakemake: {unknown}"


def test_default_profile_parses():
    from snakemake.cli import parse_args

    _, args = parse_args(["--dry-run", "--workflow-profile", str(PROFILES / "default")])
    assert args.cores >= 1 and args.rerun_incomplete and args.printshellcmds and args.show_failed_logs
    assert args.resources["gpu"].value == 1


def test_slurm_profile_sends_every_gpu_step_to_the_gpu_partition(monkeypatch):
    """The steps carry their own cluster resources, by their experiments' GPU counts: a GPU step asks
    for the GPU partition and its GPUs, a CPU step for the default partition, with no per-rule entry
    in the profile (a new paper needs none)."""
    monkeypatch.setenv("REPRO_SLURM_GPU_PARTITION", "gpuq")
    monkeypatch.setenv("REPRO_SLURM_PARTITION", "cpuq")
    profile = load_profile("slurm")
    assert profile["executor"] == "slurm" and "set-resources" not in profile
    for key in ("slurm_partition", "runtime", "mem_mb", "cpus_per_task"):
        assert key in profile["default-resources"]
    from conftest import dag_jobs

    jobs = [j for j in dag_jobs(REPO, {"scale": "paper"}) if "gpu" in j.rule.resources]
    kinds = {(j.resources["gpu"] > 0, j.resources["slurm_partition"]) for j in jobs}
    assert kinds == {(True, "gpuq"), (False, "cpuq")}
    assert {j.rule.name for j in jobs if j.resources["gpu"] > 0} >= {"experiment", "clicktrain_arm", "sweep_point"}


@pytest.mark.parametrize("gpus_here", [0, 1])
def test_smoke_steps_hold_no_gpu_slot_on_a_machine_without_a_gpu(monkeypatch, gpus_here):
    """At smoke scale on a machine without a GPU every step runs on the CPU, so the GPU-declaring
    steps hold no `gpu` slot (the default profile's one slot would make them wait for each other
    on idle cores); with a GPU here they hold their experiments' counts, as at paper scale."""
    from conftest import dag_jobs
    from repro.pipeline import scale

    monkeypatch.setattr(scale, "gpu_count", lambda: gpus_here)
    jobs = [j for j in dag_jobs(REPO, {"scale": "smoke"}) if "gpu" in j.rule.resources]
    declaring = [j for j in jobs if j.rule.name in ("experiment", "clicktrain_arm", "sweep_point")
                 and "gpu" in j.rule.resources]
    from repro import layout

    held = {j.resources["gpu"] for j in declaring}
    if gpus_here == 0:
        assert held == {0}
    else:
        assert max(held) >= 1
        for job in declaring:
            if job.rule.name != "sweep_point":
                assert job.resources["gpu"] == layout.gpus(job.wildcards.experiment), job


def test_the_makefiles_slurm_plugin_is_the_slurm_extras_pin():
    """`make slurm-plugin` installs exactly what `pip install -e .[slurm]` would."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["slurm"]
    spec = re.search(r"^SLURM_SPEC\s*:=\s*(\S+)\s*$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert extra == [spec]
