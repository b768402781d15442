"""Where things are: the papers, the shared libraries and the spine, and the files each paper owns
(docs/adding-a-paper.md). Every part of the pipeline finds a paper through these functions, so that
adding one edits no shared file. Kept light (no torch, no Hydra): Snakemake calls it at every start.

- A paper is a subpackage of ``repro`` that is not a shared library; it owns
  ``config/experiment/<paper>/``, ``config/claims/<paper>.yaml``, ``workflow/rules/<paper>.smk``,
  ``tests/<paper>/`` and ``docs/papers/<paper>.md``.
- An experiment is ``<paper>/<name>``: the file ``config/experiment/<paper>/<name>.yaml``. A variant
  names one base experiment of the same paper in its ``defaults:`` list and states only what differs;
  :func:`experiment_file` merges it as Hydra does.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(__file__).resolve().parent
# The shared libraries: what more than one paper uses (a paper imports these and the spine only).
SHARED = ("data", "models", "train", "sim", "multigpu")
# The keys an experiment file may hold (repro.run refuses others; `defaults` is Hydra's).
EXPERIMENT_KEYS = ("name", "paper", "entry", "figure", "gpus", "kernels", "inputs", "sweep", "params", "smoke")


class LayoutError(ValueError):
    """An experiment file that is missing, or whose shape breaks the conventions; the message names it."""


def config_dir() -> Path:
    return Path(os.environ.get("REPRO_CONFIG_DIR", REPO_ROOT / "config")).resolve()


def papers(package_root: Path = PACKAGE_ROOT) -> list[str]:
    """Every paper package: the subpackages of repro that are not shared libraries."""
    return sorted(p.name for p in Path(package_root).iterdir()
                  if (p / "__init__.py").is_file() and p.name not in SHARED)


def spine_modules(package_root: Path = PACKAGE_ROOT) -> list[str]:
    """The spine: repro's top-level modules that are not shared libraries."""
    return sorted(p.stem for p in Path(package_root).glob("*.py") if p.stem not in SHARED + ("__init__",))


def experiment_names(root: Path | None = None) -> list[str]:
    """Every experiment as '<paper>/<name>', sorted."""
    base = (root or config_dir()) / "experiment"
    return sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.glob("*/*.yaml"))


def split(experiment: str) -> tuple[str, str]:
    """'<paper>/<name>' -> (paper, name)."""
    paper, _, name = experiment.partition("/")
    return paper, name


def experiments_of(paper: str, root: Path | None = None) -> list[str]:
    """The names of one paper's experiments (the stems of config/experiment/<paper>/*.yaml)."""
    return [e.partition("/")[2] for e in experiment_names(root) if e.partition("/")[0] == paper]


def alternatives(names) -> str:
    """A wildcard constraint matching exactly ``names`` (one that matches nothing when there are none)."""
    return "|".join(sorted(set(names))) or "(?!)"


def experiment_path(experiment: str, root: Path | None = None) -> Path:
    return (root or config_dir()) / "experiment" / f"{experiment}.yaml"


# libyaml's loader where PyYAML was built with it (about 10x the pure-Python one: Snakemake reads every
# experiment file at each start); the same documents load the same either way.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str):
    """``yaml.safe_load`` through libyaml where available (_YAML_LOADER)."""
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)


def _read(path: Path) -> dict:
    """An experiment file's own keys (a copy: callers may change it), read once per version of the
    file (its modification time and size key the cache)."""
    stat = path.stat()
    return copy.deepcopy(_read_cached(path, stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=None)
def _read_cached(path: Path, mtime_ns: int, size: int) -> dict:
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise LayoutError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise LayoutError(f"{path}: an experiment file is a mapping of keys, got {type(data).__name__}")
    return data


def _base(path: Path, data: dict) -> Path | None:
    """The base file a variant's ``defaults: [/experiment/<paper>/<base>, _self_]`` names (None for a
    file without one); the base is an experiment of the same paper. (Hydra resolves a relative entry
    against the group of whichever file holds it, which differs between a selected and a nested
    file; the absolute form means the same everywhere.)"""
    defaults = data.get("defaults")
    if defaults is None:
        return None
    names = [d for d in defaults if d != "_self_"] if isinstance(defaults, list) else None
    paper = path.parent.name
    if (not names or len(names) != 1 or not isinstance(names[0], str) or defaults[-1] != "_self_"
            or not names[0].startswith(f"/experiment/{paper}/") or names[0].count("/") != 3):
        raise LayoutError(f"{path}: defaults must be [/experiment/{paper}/<base experiment>, _self_], got {defaults!r}")
    base = path.parent / f"{names[0].rsplit('/', 1)[1]}.yaml"
    if not base.is_file():
        raise LayoutError(f"{path}: defaults names {names[0]!r}, but {base} does not exist")
    return base


def experiment_files(experiment: str, root: Path | None = None) -> list[Path]:
    """The experiment's file and the base files it builds on, the file itself first."""
    path = experiment_path(experiment, root)
    if not path.is_file():
        raise LayoutError(f"{path}: no such experiment file (experiments: {', '.join(experiment_names(root))})")
    files = []
    while path is not None:
        if path in files:
            raise LayoutError(f"{files[0]}: its defaults form a cycle through {path}")
        files.append(path)
        path = _base(path, _read(path))
    return files


def _merge(base: dict, top: dict) -> dict:
    """``top`` over ``base`` as OmegaConf merges configs: mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@lru_cache(maxsize=None)
def _experiment_file(experiment: str, root: Path | None) -> dict:
    merged: dict = {}
    for path in reversed(experiment_files(experiment, root)):
        merged = _merge(merged, {k: v for k, v in _read(path).items() if k != "defaults"})
    paper, _, name = experiment.partition("/")
    if merged.get("name") != name or merged.get("paper") != paper:
        raise LayoutError(f"{experiment_path(experiment, root)}: name and paper must be {name!r} and {paper!r} "
                          f"(the file's stem and folder), got {merged.get('name')!r} and {merged.get('paper')!r}")
    if unknown := sorted(set(merged) - set(EXPERIMENT_KEYS)):
        raise LayoutError(f"{experiment_path(experiment, root)}: unknown key(s) {unknown}; allowed: {list(EXPERIMENT_KEYS)}")
    gpus = merged.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise LayoutError(f"{experiment_path(experiment, root)}: gpus must be a whole number >= 0 (0 = a CPU step), "
                          f"got {gpus!r}")
    return merged


def experiment_file(experiment: str, root: Path | None = None) -> dict:
    """The experiment file of '<paper>/<name>' as Hydra composes it (its base merged under it),
    checked: name and paper match the path, only known keys, ``gpus`` a whole number."""
    return _experiment_file(experiment, None if root is None else Path(root).resolve())


def gpus(experiment: str, root: Path | None = None) -> int:
    """The GPUs a paper-scale run of the experiment uses (0: a CPU step)."""
    return experiment_file(experiment, root)["gpus"]


def kernels(experiment: str, root: Path | None = None) -> list[str]:
    """The cubin stems the experiment loads (its file's ``kernels``)."""
    return list(experiment_file(experiment, root).get("kernels") or [])


def inputs(experiment: str, root: Path | None = None) -> dict[str, str]:
    """The experiment's declared inputs: name -> path below the results root."""
    declared = experiment_file(experiment, root).get("inputs") or {}
    if not isinstance(declared, dict) or not all(isinstance(v, str) for v in declared.values()):
        raise LayoutError(f"{experiment_path(experiment, root)}: inputs must map names to paths below results/, "
                          f"got {declared!r}")
    return dict(declared)


def kernel_sources(package_root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every CUDA C kernel source by stem (src/repro/<paper>/kernels/<stem>.cu); stems are unique."""
    found: dict[str, Path] = {}
    for path in sorted(Path(package_root).glob("*/kernels/*.cu")):
        if path.stem in found:
            raise LayoutError(f"{path} and {found[path.stem]} share the stem {path.stem!r}: cubins are named by stem")
        found[path.stem] = path
    return found


def record_path(experiment: str, results: str = "results") -> str:
    return f"{results}/{experiment}/record.json"


def figure_path(experiment: str, results: str = "results", suffix: str = "png") -> str:
    """results/figures/<paper>/<name>.<suffix>"""
    return f"{results}/figures/{experiment}.{suffix}"


def claims_files(root: Path | None = None) -> list[Path]:
    """The ledger: one claims file per paper (config/claims/<paper>.yaml)."""
    return sorted(((root or config_dir()) / "claims").glob("*.yaml"))
