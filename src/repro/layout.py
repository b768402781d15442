"""Where things are: the papers, the shared libraries and the spine, and the files each paper owns
(docs/adding-a-paper.md). Every part of the pipeline finds a paper through these functions, so that
adding one edits no shared file. Kept light (no torch, no Hydra): Snakemake calls it at every start.

- A paper is a subpackage of ``repro.papers``; it owns
  ``config/experiment/<paper>/``, ``config/claims/<paper>.yaml``, ``tests/<paper>/`` and
  ``docs/papers/<paper>.md``, and ``workflow/rules/<paper>.smk`` only where it has steps of its own
  (the workflow's experiment rule runs every experiment file).
- An experiment is ``<paper>/<name>``: the file ``config/experiment/<paper>/<name>.yaml``. A variant
  names one base of the same paper in its ``defaults:`` list and states only what differs;
  :func:`experiment_file` merges it as Hydra does.
- A base whose name starts with ``_`` (``config/experiment/superneurons/_vs_today.yaml``) is abstract:
  what several experiments share where none of them is a natural base for the others. It is no
  experiment: not listed, not a workflow target, refused by ``repro.pipeline.run``.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(__file__).resolve().parent
PAPERS_ROOT = PACKAGE_ROOT / "papers"
# The shared libraries: what more than one paper uses (a paper imports these and the spine only).
SHARED = ("data", "models", "train", "sim", "multigpu", "split")
# Beside the papers and never imported by them: the pipeline's drivers and the claims report.
APART = ("pipeline", "report")
# The keys an experiment file may hold (repro.pipeline.run refuses others; `defaults` is Hydra's).
EXPERIMENT_KEYS = ("name", "paper", "entry", "figure", "gpus", "kernels", "inputs", "sweep", "params", "smoke")


# Modules that moved when the tree took its three layers (papers under repro.papers, the drivers under
# repro.pipeline, the report under repro.report): records made before name them by their former
# names, which these map to the present ones (figure entries, code paths), and back (so that a
# move alone does not count as a change of the code that made a record).
MOVED = {**{f"repro.{p}": f"repro.papers.{p}" for p in (
             "baseline", "ceilings", "clicktrain", "comet", "gpucache", "interconnect", "oovr", "pimcaps", "qvr",
             "sparse_gemm", "sptrsv", "superneurons", "tsm2x")},
         **{f"repro.{m}": f"repro.pipeline.{m}" for m in (
             "run", "gpu_slots", "scale", "provenance", "reference", "tracking", "watchdog")},
         "repro.claims": "repro.report.claims", "repro.claims_chart": "repro.report.chart",
         "repro.report_content": "repro.report.content", "repro.report_html": "repro.report.html_page",
         "repro.report_markdown": "repro.report.markdown_page", "repro.browser": "repro.report.browser",
         "repro.artifact": "repro.report.artifact", "repro.report": "repro.report.pages",
         "repro.build_kernels": "repro.kernels.build"}
_FORMER = {new: old for old, new in MOVED.items()}


def _remap(name: str, table: dict[str, str]) -> str:
    """``name`` (a dotted module path, or one followed by '.attr') with its longest prefix in ``table``
    replaced."""
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        if (head := ".".join(parts[:i])) in table:
            return ".".join([table[head], *parts[i:]])
    return name


def current_module(name: str) -> str:
    """The present name of a module (or 'module.attr') that a record made before the move names."""
    return _remap(name, MOVED)


def former_module(name: str) -> str:
    """The name a present module had before the move (itself where it did not move)."""
    return _remap(name, _FORMER)


def current_path(rel: str) -> str:
    """The present repository path of a file a record made before the move names (itself otherwise):
    src/repro/comet/kernels/comet.cu -> src/repro/papers/comet/kernels/comet.cu, src/repro/run.py ->
    src/repro/pipeline/run.py, src/repro/kernels.py -> src/repro/kernels/__init__.py."""
    parts = Path(rel).parts
    if parts[:2] != ("src", "repro") or len(parts) < 3:
        return rel
    *folders, name = parts[2:]
    if not name.endswith(".py"):
        where = current_module(".".join(["repro", *folders])).split(".")[1:]
        return Path("src", "repro", *where, name).as_posix()
    stem = Path(name).stem
    module = ".".join(["repro", *folders] + ([] if stem == "__init__" else [stem]))
    where = current_module(module).split(".")[1:]
    as_module = Path("src", "repro", *where[:-1], f"{where[-1]}.py") if where else None
    as_package = Path("src", "repro", *where, "__init__.py")
    if stem != "__init__" and as_module is not None and (stem == where[-1] and (REPO_ROOT / as_module).is_file()
                                                           or not (REPO_ROOT / as_package).is_file()):
        return as_module.as_posix()
    return as_package.as_posix()


def former_path(rel: str) -> str:
    """The path a file at ``rel`` had before the move (itself where it did not move): the inverse of
    current_path."""
    parts = Path(rel).parts
    if parts[:2] != ("src", "repro") or len(parts) < 3:
        return rel
    *folders, name = parts[2:]
    if not name.endswith(".py"):
        return Path("src", "repro", *former_module(".".join(["repro", *folders])).split(".")[1:], name).as_posix()
    stem = Path(name).stem
    module = ".".join(["repro", *folders] + ([] if stem == "__init__" else [stem]))
    where = former_module(module).split(".")[1:]
    if stem == "__init__" and module in ("repro.kernels", "repro.multigpu"):  # were modules, now packages
        return Path("src", "repro", f"{where[-1]}.py").as_posix()
    if stem == "__init__":
        return Path("src", "repro", *where, "__init__.py").as_posix()
    return Path("src", "repro", *where[:-1], f"{where[-1]}.py").as_posix()


class LayoutError(ValueError):
    """An experiment file that is missing, or whose shape breaks the conventions; the message names it."""


def config_dir() -> Path:
    return Path(os.environ.get("REPRO_CONFIG_DIR", REPO_ROOT / "config")).resolve()


def papers(papers_root: Path = PAPERS_ROOT) -> list[str]:
    """Every paper: the subpackages of repro.papers."""
    return sorted(p.name for p in Path(papers_root).iterdir() if (p / "__init__.py").is_file())


def spine_modules(package_root: Path = PACKAGE_ROOT) -> list[str]:
    """The spine: repro's top-level modules and packages that are neither shared libraries, papers, nor
    the drivers and the report beside them."""
    return sorted({p.stem for p in Path(package_root).glob("*.py") if p.stem != "__init__"}
                  | {p.name for p in Path(package_root).iterdir() if (p / "__init__.py").is_file()
                     and p.name not in SHARED + APART + ("papers",)})


def is_abstract(experiment: str) -> bool:
    """Whether '<paper>/<name>' names an abstract base (its name starts with '_'): a file other
    experiments of the paper build on, never run itself."""
    return split(experiment)[1].startswith("_")


def experiment_names(root: Path | None = None) -> list[str]:
    """Every experiment as '<paper>/<name>' (config/experiment/*/*.yaml, hidden names aside as glob
    leaves them), sorted (abstract bases are none). Listed with os.scandir: pathlib's glob took
    3 ms a call, and the claims report asks about 400 times."""
    base = (root or config_dir()) / "experiment"
    names = []
    try:
        with os.scandir(base) as papers:
            folders = [e.path for e in papers if not e.name.startswith(".") and e.is_dir()]
    except OSError:
        return []
    for folder in folders:
        paper = os.path.basename(folder)
        with os.scandir(folder) as files:
            names += [f"{paper}/{e.name[:-5]}" for e in files if e.name.endswith(".yaml") and not e.name.startswith(".")]
    return sorted(n for n in names if not is_abstract(n))


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
    file without one); the base is an experiment or an abstract base of the same paper. (Hydra resolves a relative entry
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
    if is_abstract(experiment):
        raise LayoutError(f"{experiment_path(experiment, root)}: {experiment} is an abstract base (its name starts "
                          f"with '_'): other experiments build on it, it is not run itself")
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
    checked: name and paper match the path, only known keys, ``gpus`` a whole number; an abstract base
    is refused (LayoutError)."""
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


def kernel_sources(papers_root: Path = PAPERS_ROOT) -> dict[str, Path]:
    """Every CUDA C kernel source by stem (src/repro/papers/<paper>/kernels/<stem>.cu); stems are unique."""
    found: dict[str, Path] = {}
    for path in sorted(Path(papers_root).glob("*/kernels/*.cu")):
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
