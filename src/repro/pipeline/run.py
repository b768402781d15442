"""`python -m repro.pipeline.run experiment=<paper>/<name> [scale=...] [key=value ...]`

Thin Hydra wrapper: compose and validate the config, call one experiment function, write its
run record. Exit codes: 0 ok (or skipped: needs a GPU at smoke scale), 2 bad config or input,
3 GPU-only step without a GPU at paper scale, 1 the experiment itself failed.

Nothing is written before the whole config is checked: the command line is composed and validated
first (unknown keys are named with the valid ones, an unknown experiment lists the experiments),
and Hydra's config copy (``<out>/.hydra/``) is written only beside a new record, so a rejected
command leaves a finished run's folder as it was.

Overrides: ``experiment.params.<key>=<value>`` on the command line wins at every scale (at smoke
scale over the experiment file's ``smoke`` block too). A run into a folder holding a record of
another configuration (a hand run with a changed parameter into the workflow's
``results/<paper>/<name>``) is refused unless ``replace=true`` (the workflow passes it: it reruns
a step exactly when the step's config or code changed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import inspect
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from repro.atomic import atomic_write

from repro import layout, machine, records, sweep
from repro.pipeline import provenance
from repro.pipeline.gpu_slots import claim_gpus, gpu_source, visible_gpus
from repro.pipeline.scale import param_layers, resolve_scale
from repro.experiment import STAGES, Context, NeedsGPU, cuda_available, load_entry

CONFIG_DIR = layout.config_dir()
log = logging.getLogger("repro")


class ConfigError(ValueError):
    """A bad key or value in the composed config; the message names it."""


def cli_param_keys(overrides) -> list[str]:
    """The ``experiment.params`` keys (dotted, below params) set by command-line overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = []
    for o in OverridesParser.create().parse_overrides([str(x) for x in overrides or ()]):
        key = o.key_or_group
        if key.startswith("experiment.params.") and not o.is_delete():
            keys.append(key[len("experiment.params."):])
    return keys


def experiment_params(spec, exp_cfg: DictConfig, scale: str, cli_keys=()):
    """Validate experiment params against the experiment's dataclass; smoke overrides on top, and
    the command line's ``experiment.params.*`` (``cli_keys``) on top of those, so that an override
    is never silently beaten by the smoke block."""
    unknown = set(exp_cfg.keys()) - set(layout.EXPERIMENT_KEYS)
    if unknown:
        raise ConfigError(f"experiment: unknown key(s) {sorted(unknown)}; allowed: {list(layout.EXPERIMENT_KEYS)}")
    cli = OmegaConf.create({})
    for key in cli_keys:
        OmegaConf.update(cli, key, OmegaConf.select(exp_cfg.params, key), force_add=True)
    layers = [OmegaConf.structured(spec.params), *param_layers(exp_cfg, scale), cli]
    try:
        merged = OmegaConf.merge(*layers)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
        names = ", ".join(f.name for f in dataclasses.fields(spec.params))
        raise ConfigError(
            f"experiment.params{'.' + str(key) if key else ''}: {str(exc).splitlines()[0]} "
            f"(valid keys for {exp_cfg.name}: {names})"
        ) from None


def experiment_files(experiment: str) -> tuple[Path, ...]:
    """The experiment's file and its base files (none for a config composed without a file)."""
    try:
        return tuple(layout.experiment_files(experiment, CONFIG_DIR))
    except layout.LayoutError:
        return ()


def resolve_inputs(exp_cfg: DictConfig, scale: str, results: Path) -> dict[str, Path]:
    """The files the experiment reads, by name: its declared ``inputs`` (paths below ``results``,
    or absolute), the kernels folder where it loads cubins, and a sweep's point records (under the
    points' names; a point that has not run is the sweep function's to report). Declared inputs
    must exist: nothing runs before what it reads is there."""
    found = {}
    for name, value in (exp_cfg.get("inputs") or {}).items():
        path = Path(str(value))
        path = path if path.is_absolute() else results / path
        if not path.exists():
            raise ConfigError(f"experiment.inputs.{name}: {path} does not exist (run the step that makes it first)")
        found[name] = path
    if exp_cfg.get("kernels"):
        found.setdefault("kernels", results / "build" / "kernels")
    if exp_cfg.get("sweep"):
        experiment = f"{exp_cfg.paper}/{exp_cfg.name}"
        for name, path in sweep.needed_records(experiment, scale, results=str(results)).items():
            found[name] = Path(path)
    return found


def gpu_plan(spec, want: int, device: str, scale: str) -> tuple[str, int, str | None]:
    """(device, GPUs to claim, skip reason) for an experiment that uses ``want`` GPUs at paper scale:
    a CPU step or device=cpu runs on the CPU; with enough GPUs here it claims them; with fewer, a
    paper-scale run is refused (NeedsGPU, naming the need), a smoke-scale one runs its CPU path or,
    where it has none, is recorded as skipped with the reason."""
    if device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"device: must be auto, cuda or cpu, got {device!r}")
    if want == 0 or (device == "cpu" and not spec.needs_gpu):
        return "cpu", 0, None
    have = 0 if device == "cpu" else visible_gpus()
    if have >= want:
        return "cuda", want, None
    need = f"needs {want} CUDA GPU{'s' if want > 1 else ''} and " + (
        "device=cpu was asked for" if device == "cpu" else f"this machine has {have}")
    if scale == "paper" or device == "cuda":
        raise NeedsGPU(f"{need}; run it on a machine with {want}, or use scale=smoke to record it as skipped"
                       if scale == "paper" else f"device=cuda: {need}")
    if spec.needs_gpu:
        return "none", 0, f"skipped: {need}"
    return "cpu", 0, None


@dataclasses.dataclass
class Plan:
    """A validated run: everything execute() needs, computed before anything is written."""

    exp_cfg: DictConfig
    scale: str
    spec: object
    params: object
    device: str
    held: int
    skip: str | None
    inputs: dict


def plan(cfg: DictConfig, overrides=()) -> Plan:
    """Check the whole composed config (``overrides``: the command line, for the params it sets);
    writes nothing. Raises ConfigError / NeedsGPU / RecordError naming the problem."""
    exp_cfg = cfg.get("experiment")
    if abstract := _abstract_base(overrides):
        raise ConfigError(abstract)
    if not exp_cfg:
        experiments = layout.experiment_names(CONFIG_DIR)
        raise ConfigError(f"choose one experiment=<paper>/<name>; available: {', '.join(experiments)}")
    if cfg.device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"device: must be auto, cuda or cpu, got {cfg.device!r}")
    try:
        scale = resolve_scale(cfg.scale)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    spec = load_entry(exp_cfg.entry)
    params = experiment_params(spec, exp_cfg, scale, cli_param_keys(overrides))
    want = exp_cfg.get("gpus")
    if not isinstance(want, int) or isinstance(want, bool) or want < 0:
        raise ConfigError(f"experiment.gpus: must be a whole number >= 0 (0 = a CPU step), got {want!r}")
    device, held, skip = gpu_plan(spec, want, cfg.device, scale)
    inputs = resolve_inputs(exp_cfg, scale, Path(cfg.results))
    check_replace(cfg, exp_cfg, scale, dataclasses.asdict(params))
    return Plan(exp_cfg, scale, spec, params, device, held, skip, inputs)


def check_replace(cfg: DictConfig, exp_cfg: DictConfig, scale: str, params: dict) -> None:
    """Refuse to replace a record in ``out`` made with another configuration, unless replace=true."""
    if cfg.get("replace"):
        return
    try:
        old = records.read(Path(cfg.out))
    except records.RecordError:  # none there (or unreadable: nothing worth keeping)
        return
    new = {"experiment": f"{exp_cfg.paper}/{exp_cfg.name}", "scale": scale, "seed": int(cfg.seed), "params": params}
    was = {"experiment": f"{old.get('paper')}/{old.get('experiment')}", "scale": old.get("scale"),
           "seed": old.get("seed"), "params": old.get("params")}
    if json.loads(json.dumps(new, default=str)) == json.loads(json.dumps(was, default=str)):
        return
    diff = [k for k in new if k != "params" and new[k] != was[k]]
    diff += [f"params.{k}" for k in sorted(set(params) | set(was["params"] or {}))
             if json.dumps(params.get(k), default=str) != json.dumps((was["params"] or {}).get(k), default=str)]
    raise ConfigError(f"out={cfg.out} holds a record made with another configuration ({', '.join(diff)} differ); "
                      "it would be replaced: choose another out=<folder>, or pass replace=true to replace it")


def write_hydra_copy(out_dir: Path, cfg: DictConfig, overrides) -> None:
    """Hydra's config copy beside the record (``.hydra/config.yaml``, ``overrides.yaml``), written
    here rather than by Hydra so that only a run that writes a record writes it."""
    for name, text in (("config.yaml", OmegaConf.to_yaml(cfg)),
                       ("overrides.yaml", OmegaConf.to_yaml(OmegaConf.create([str(o) for o in overrides or ()])))):
        atomic_write(out_dir / ".hydra" / name, lambda fh, t=text: fh.write(t.encode()))


def execute(cfg: DictConfig, overrides=()) -> Path:
    """Run one composed config; returns the record path. Raises ConfigError / NeedsGPU."""
    p = plan(cfg, overrides)
    exp_cfg, scale, spec, params, device, held, skip, inputs = (
        p.exp_cfg, p.scale, p.spec, p.params, p.device, p.held, p.skip, p.inputs)
    if held:  # before anything initialises CUDA
        claim_gpus(held)
    out_dir = Path(cfg.out)
    plain_cfg = OmegaConf.to_container(cfg, resolve=True)
    plain_cfg["scale"] = scale
    record = {
        "experiment": exp_cfg.name,
        "paper": exp_cfg.paper,
        "scale": scale,
        "seed": int(cfg.seed),
        "gpus": held,
        "figure": exp_cfg.get("figure"),
        "params": dataclasses.asdict(params),
        "inputs": {k: str(v) for k, v in inputs.items()},
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "provenance": provenance.collect(plain_cfg),
        "metrics": {},
        "tags": {},
        "artifacts": {},
        "tables": [],
        "reason": None,
    }
    if skip:
        record.update(status="skipped", reason=skip, device="none")
        log.warning("%s/%s %s", exp_cfg.paper, exp_cfg.name, skip)
        write_hydra_copy(out_dir, cfg, overrides)
        return records.write(out_dir, record)
    if device == "cuda" and not cuda_available():
        raise NeedsGPU(f"experiment {exp_cfg.paper}/{exp_cfg.name}: {gpu_source()} give {held} GPU(s) "
                       "but torch sees no CUDA device (a CPU-only torch build?)")
    ctx = Context(out_dir=out_dir, scale=scale, device=device, seed=cfg.seed, inputs=inputs, log=log,
                  gpus=held, results=Path(cfg.results), stage_key=stage_key(record, spec, device))
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("running %s/%s at %s scale on %s", exp_cfg.paper, exp_cfg.name, scale, device)
    t0 = time.monotonic()
    watch = machine.GpuNeighbours(uuid=machine.device_uuid()) if device == "cuda" else contextlib.nullcontext()
    with watch:
        result = spec(params, ctx)
    record["provenance"]["code"] = provenance.code_digests(provenance.code_files(
        list(sys.modules), extra=experiment_files(f"{exp_cfg.paper}/{exp_cfg.name}")))
    if device == "cuda":
        shared = watch.summary()
        record["provenance"]["gpu_sharing"] = shared or "unknown (nvidia-smi's processes could not be matched)"
        if shared and shared["gpu_neighbours_max"]:
            log.warning("%s/%s shared the GPU with up to %d other process(es): its speeds are shared-GPU speeds",
                        exp_cfg.paper, exp_cfg.name, shared["gpu_neighbours_max"])
    for name, table in result.tables.items():
        path = out_dir / f"{name}.csv"
        records.atomic_write_text(path, table.to_csv(index=False))
        record["tables"].append(path.name)
    record.update(
        status="ok",
        device=device,
        duration_s=round(time.monotonic() - t0, 3),
        metrics={k: float(v) for k, v in result.metrics.items()},
        tags={k: str(v) for k, v in result.tags.items()},
        artifacts={k: str(Path(v).relative_to(out_dir) if Path(v).is_relative_to(out_dir) else v)
                   for k, v in result.artifacts.items()},
    )
    if ctx.resumed:
        record["tags"].setdefault("resumed", "stages from a killed run: " + ", ".join(ctx.resumed))
    write_hydra_copy(out_dir, cfg, overrides)
    path = records.write(out_dir, record)
    shutil.rmtree(out_dir / STAGES, ignore_errors=True)  # the record holds them now: a rerun computes again
    log.info("%s/%s done in %.1fs: %s", exp_cfg.paper, exp_cfg.name, record["duration_s"],
             ", ".join(f"{k}={v:.4g}" for k, v in list(record["metrics"].items())[:8]))
    return path


def stage_key(record: dict, spec, device: str) -> str:
    """What a Context.stage value depends on: the parameters, scale, seed, inputs and device of the run and the
    source of the experiment's module (an edit there makes a killed run's stages stale)."""
    src = provenance.source_digest(Path(inspect.getfile(spec.fn)))
    what = [record["params"], record["scale"], record["seed"], record["inputs"], device, src]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _fail(message: str, code: int = 2) -> int:
    print(f"repro.pipeline.run: error: {message}", file=sys.stderr)
    return code


def _valid_keys(key: str, argv: list[str]) -> str:
    """The keys valid where ``key`` was set, for an unknown-key message."""
    from hydra import compose, initialize_config_dir

    exp = [a for a in argv if a.split("=", 1)[0].lstrip("+") == "experiment"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        base = compose(config_name="run", overrides=exp)
    if key.startswith("experiment.params.") and base.get("experiment"):
        fields = [f.name for f in dataclasses.fields(load_entry(base.experiment.entry).params)]
        return f"valid keys for experiment.params of {base.experiment.paper}/{base.experiment.name}: {', '.join(fields)}"
    if key.startswith("experiment."):
        return f"valid experiment keys: {', '.join(layout.EXPERIMENT_KEYS)}"
    return f"valid keys: {', '.join(k for k in base.keys())} (and hydra.*)"


# Errors of the shared libraries that a run reports as one plain line (exit 2), not a traceback, by
# the module defining each. They are looked up only in modules the run has loaded: importing
# repro.data or repro.train just to name an exception loads torch (seconds per job; the whole
# import also lands in the record's provenance.code) in runs that never touch them, and an
# exception of a module that was never imported cannot have been raised.
LIBRARY_ERRORS = (("repro.data.arrays", "DataError"), ("repro.train.checkpoint", "CheckpointMismatch"))


def reported_errors() -> tuple[type[BaseException], ...]:
    """The exception classes a run reports as a plain message: the spine's and LIBRARY_ERRORS' loaded ones."""
    found: list[type[BaseException]] = [ConfigError, records.RecordError, FileNotFoundError]
    found += [getattr(sys.modules[mod], name) for mod, name in LIBRARY_ERRORS if mod in sys.modules]
    return tuple(found)


def _asked_experiments(argv) -> list[str]:
    """The experiments the command line's ``experiment=`` overrides name, in order."""
    args = [str(a) for a in argv or ()]
    return [a.split("=", 1)[1] for a in args if a.split("=", 1)[0].lstrip("+") == "experiment" and "=" in a]


def _abstract_base(argv) -> str | None:
    """The error for a command line whose experiment is an abstract base (layout.is_abstract), else None."""
    asked = _asked_experiments(argv)
    if not asked or not layout.is_abstract(asked[-1]):
        return None
    return (f"experiment={asked[-1]}: an abstract base (its name starts with '_'), which experiments build on "
            f"but which is not run itself; available: {', '.join(layout.experiment_names(CONFIG_DIR))}")


def precheck(argv: list[str]) -> int:
    """Validate the command line as the run will, writing nothing: 0 when it is good, else the exit
    code after printing what is wrong (checked_config)."""
    checked = checked_config(argv)
    return checked if isinstance(checked, int) else 0


def checked_config(argv: list[str]) -> int | DictConfig:
    """Compose and validate the command line as the run will (plan()), before anything is created or
    written; the composed config when it is good, else the exit code after printing what is wrong."""
    import re

    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException

    if abstract := _abstract_base(argv):
        return _fail(abstract)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="run", overrides=argv)
    except MissingConfigException as exc:
        experiments = layout.experiment_names(CONFIG_DIR)
        asked = _asked_experiments(argv)
        if asked and asked[-1] not in experiments:
            return _fail(f"experiment={asked[-1]}: no such experiment; available: {', '.join(experiments)}")
        return _fail(str(exc).splitlines()[0])
    except HydraException as exc:
        text = "\n".join(str(e) for e in (exc, exc.__cause__) if e is not None)
        m = re.search(r"Could not (?:override|append to config\.) '([^']+)'", text)
        if m:
            cause = next((ln.strip() for ln in text.splitlines() if "not in struct" in ln), "")
            return _fail(f"{m.group(1)}: unknown key{f' ({cause})' if cause else ''}; {_valid_keys(m.group(1), argv)}")
        return _fail(" ".join(text.split()))
    try:
        plan(cfg, argv)
    except NeedsGPU as exc:
        return _fail(str(exc), 3)
    except Exception as exc:
        if isinstance(exc, reported_errors()):
            return _fail(str(exc))
        raise
    return cfg


def _execute_reporting(cfg: DictConfig, overrides) -> None:
    """execute(), with the errors a user can fix reported as one line and an exit code."""
    try:
        execute(cfg, overrides)
    except NeedsGPU as exc:
        sys.exit(_fail(str(exc), 3))
    except Exception as exc:
        if isinstance(exc, reported_errors()):
            sys.exit(_fail(str(exc)))
        raise


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="run")
def hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    _execute_reporting(cfg, HydraConfig.get().overrides.task)


def _job_logging() -> None:
    """Logging as hydra.main sets it up for config/run.yaml's ``hydra/job_logging: stdout``: from
    Hydra's own file of that name."""
    import logging.config
    from importlib.resources import files

    import yaml

    logging.config.dictConfig(yaml.safe_load(files("hydra").joinpath("conf/hydra/job_logging/stdout.yaml").read_text()))


def main() -> None:
    """Entry point: a plain command line (overrides only) is composed and validated before anything is
    written, so a bad one writes nothing, and then runs on that composed config: Hydra would compose
    it again (about 0.25 s of a smoke job's 1.7 s start-up). A command line with Hydra's own flags (--help,
    --cfg, -m, ...) or ``hydra.*`` overrides goes to Hydra's entry point."""
    from repro.pipeline import watchdog

    watchdog.start()  # a job of a killed workflow stops (repro.pipeline.watchdog)
    argv = sys.argv[1:]
    if any(a.startswith("-") for a in argv):
        hydra_main()
        return
    cfg = checked_config(argv)
    if isinstance(cfg, int):
        sys.exit(cfg)
    if any(a.lstrip("+~").startswith("hydra") for a in argv):
        hydra_main()
        return
    _job_logging()
    _execute_reporting(cfg, argv)


if __name__ == "__main__":
    main()
