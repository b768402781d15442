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
import os
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from repro import provenance, records
from repro.gpu_slots import claim_gpu
from repro.scale import param_layers, resolve_scale
from repro.experiment import Context, NeedsGPU, cuda_available, load_entry, resolve_device

CONFIG_DIR = Path(os.environ.get("REPRO_CONFIG_DIR", provenance.REPO_ROOT / "config")).resolve()
EXPERIMENT_KEYS = {"name", "paper", "entry", "figure", "params", "smoke"}
log = logging.getLogger("repro")


class ConfigError(ValueError):
    """A bad key or value in the composed config; the message names it."""


def experiment_params(spec, exp_cfg: DictConfig, scale: str):
    """Validate experiment params against the experiment's dataclass; smoke overrides on top."""
    unknown = set(exp_cfg.keys()) - EXPERIMENT_KEYS
    if unknown:
        raise ConfigError(f"experiment: unknown key(s) {sorted(unknown)}; allowed: {sorted(EXPERIMENT_KEYS)}")
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


def execute(cfg: DictConfig) -> Path:
    """Run one composed config; returns the record path. Raises ConfigError / NeedsGPU."""
    exp_cfg = cfg.get("experiment")
    if not exp_cfg:
        experiments = sorted(str(p.relative_to(CONFIG_DIR / "experiment").with_suffix(""))
                             for p in (CONFIG_DIR / "experiment").glob("*/*.yaml"))
        raise ConfigError(f"choose one experiment=<paper>/<name>; available: {', '.join(experiments)}")
    try:
        scale = resolve_scale(cfg.scale)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    spec = load_entry(exp_cfg.entry)
    params = experiment_params(spec, exp_cfg, scale)
    if cfg.device != "cpu":  # before anything initialises CUDA
        claim_gpu()
    out_dir = Path(cfg.out)
    inputs = {k: Path(v) for k, v in (cfg.inputs or {}).items() if v is not None}
    for name, path in inputs.items():
        if not path.exists():
            raise ConfigError(f"inputs.{name}: {path} does not exist (run the step that makes it first)")
    plain_cfg = OmegaConf.to_container(cfg, resolve=True)
    plain_cfg["scale"] = scale
    record = {
        "experiment": exp_cfg.name,
        "paper": exp_cfg.paper,
        "scale": scale,
        "seed": int(cfg.seed),
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
    if spec.needs_gpu and not cuda_available():
        if scale == "paper":
            raise NeedsGPU(
                f"experiment {exp_cfg.paper}/{exp_cfg.name} needs a CUDA GPU and none is visible; "
                "run it on a GPU machine, or use scale=smoke to record it as skipped"
            )
        record.update(status="skipped", reason="skipped: needs a CUDA GPU", device="none")
        log.warning("%s/%s skipped: needs a CUDA GPU", exp_cfg.paper, exp_cfg.name)
        return records.write(out_dir, record)
    device = resolve_device(cfg.device)
    ctx = Context(out_dir=out_dir, scale=scale, device=device, seed=cfg.seed, inputs=inputs, log=log)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("running %s/%s at %s scale on %s", exp_cfg.paper, exp_cfg.name, scale, device)
    t0 = time.monotonic()
    watch = provenance.GpuNeighbours(uuid=provenance.device_uuid()) if device == "cuda" else contextlib.nullcontext()
    with watch:
        result = spec(params, ctx)
    experiment_file = CONFIG_DIR / "experiment" / exp_cfg.paper / f"{exp_cfg.name}.yaml"
    record["provenance"]["code"] = provenance.code_digests(
        provenance.code_files(list(sys.modules), extra=(experiment_file,)))
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
