"""`python -m repro.run experiment=<paper>/<name> [scale=...] [key=value ...]`

Thin Hydra wrapper: compose and validate the config, call one experiment function, write its
run record. Exit codes: 0 ok (or skipped: needs a GPU at smoke scale), 2 bad config or input,
3 GPU-only step without a GPU at paper scale, 1 the experiment itself failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from repro import layout, machine, provenance, records, sweep
from repro.gpu_slots import claim_gpus, gpu_source, visible_gpus
from repro.scale import param_layers, resolve_scale
from repro.experiment import Context, NeedsGPU, cuda_available, load_entry

CONFIG_DIR = layout.config_dir()
log = logging.getLogger("repro")


class ConfigError(ValueError):
    """A bad key or value in the composed config; the message names it."""


def experiment_params(spec, exp_cfg: DictConfig, scale: str):
    """Validate experiment params against the experiment's dataclass; smoke overrides on top."""
    unknown = set(exp_cfg.keys()) - set(layout.EXPERIMENT_KEYS)
    if unknown:
        raise ConfigError(f"experiment: unknown key(s) {sorted(unknown)}; allowed: {list(layout.EXPERIMENT_KEYS)}")
    layers = [OmegaConf.structured(spec.params), *param_layers(exp_cfg, scale)]
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


def execute(cfg: DictConfig) -> Path:
    """Run one composed config; returns the record path. Raises ConfigError / NeedsGPU."""
    exp_cfg = cfg.get("experiment")
    if not exp_cfg:
        experiments = layout.experiment_names(CONFIG_DIR)
        raise ConfigError(f"choose one experiment=<paper>/<name>; available: {', '.join(experiments)}")
    try:
        scale = resolve_scale(cfg.scale)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    spec = load_entry(exp_cfg.entry)
    params = experiment_params(spec, exp_cfg, scale)
    want = exp_cfg.get("gpus")
    if not isinstance(want, int) or isinstance(want, bool) or want < 0:
        raise ConfigError(f"experiment.gpus: must be a whole number >= 0 (0 = a CPU step), got {want!r}")
    device, held, skip = gpu_plan(spec, want, cfg.device, scale)
    inputs = resolve_inputs(exp_cfg, scale, Path(cfg.results))
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
        return records.write(out_dir, record)
    if device == "cuda" and not cuda_available():
        raise NeedsGPU(f"experiment {exp_cfg.paper}/{exp_cfg.name}: {gpu_source()} give {held} GPU(s) "
                       "but torch sees no CUDA device (a CPU-only torch build?)")
    ctx = Context(out_dir=out_dir, scale=scale, device=device, seed=cfg.seed, inputs=inputs, log=log,
                  gpus=held, results=Path(cfg.results))
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
    path = records.write(out_dir, record)
    log.info("%s/%s done in %.1fs: %s", exp_cfg.paper, exp_cfg.name, record["duration_s"],
             ", ".join(f"{k}={v:.4g}" for k, v in list(record["metrics"].items())[:8]))
    return path


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="run")
def main(cfg: DictConfig) -> None:
    from repro.data import DataError
    from repro.train.checkpoint import CheckpointMismatch

    try:
        execute(cfg)
    except (ConfigError, records.RecordError, FileNotFoundError, DataError, CheckpointMismatch) as exc:
        print(f"repro.run: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except NeedsGPU as exc:
        print(f"repro.run: error: {exc}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
