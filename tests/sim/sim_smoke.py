"""Runs a simulator paper's experiment file at smoke scale by calling its entry directly (the file
resolved as the runner does, ``repro.layout.experiment_file``), and checks its claims file."""

from __future__ import annotations

import importlib
from pathlib import Path

from omegaconf import OmegaConf

from repro import layout
from repro.experiment import Context, load_entry
from repro.pipeline.scale import param_layers

REPO = Path(__file__).resolve().parents[2]
# each experiment's smoke result as run() last made it (no inputs): check_claims reads their metrics
# instead of running the experiments again that the paper's test_smoke ran just before (results are
# only read, never changed, by the tests)
_SMOKE_RESULTS: dict = {}


def compose(experiment: str):
    return OmegaConf.create(layout.experiment_file(experiment))


def run(experiment: str, out_dir: Path, scale: str = "smoke", inputs: dict | None = None, record: bool = False):
    """(result, figure) of the experiment run here on the CPU, its tables written beside it; ``inputs``
    as the runner hands them over; ``record``: also a record.json of its tags, metrics and params (for
    an experiment that reads this one)."""
    import json

    cfg = compose(experiment)
    spec = load_entry(cfg.entry)
    params = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(spec.params), *param_layers(cfg, scale)))
    result = spec(params, Context(out_dir=out_dir, scale=scale, device="cpu", inputs=inputs or {}))
    if scale == "smoke" and not inputs:
        _SMOKE_RESULTS[experiment] = result
    for name, table in result.tables.items():
        table.to_csv(out_dir / f"{name}.csv", index=False)
    if record:
        (out_dir / "record.json").write_text(json.dumps({"tags": result.tags, "metrics": result.metrics,
                                                         "params": OmegaConf.to_container(OmegaConf.structured(params))}))
    module, _, fn = cfg.figure.partition(":")
    fig = getattr(importlib.import_module(module), fn)(out_dir)
    return result, fig


def smoke_result(experiment: str, tmp_path: Path):
    """The experiment's smoke result: the one run() made in this process (the paper's test_smoke), else
    a run here (into a folder of ``tmp_path`` named for it)."""
    if experiment not in _SMOKE_RESULTS:
        (tmp_path / experiment).mkdir(parents=True)
        run(experiment, tmp_path / experiment)
    return _SMOKE_RESULTS[experiment]


def check_claims(paper: str, tmp_path: Path) -> None:
    """The paper's claims file has one model row named for the paper, only ledger fields, and every
    condition reads a metric its experiment (run at smoke scale) writes."""
    import yaml

    from repro.report.claims import CLAIM_FIELDS

    claims = yaml.safe_load((REPO / "config" / "claims" / f"{paper}.yaml").read_text())["claims"]
    assert [c["id"] for c in claims] == [paper]
    results = {}
    for claim in claims:
        assert set(claim) <= CLAIM_FIELDS and claim["kind"] == "model"
        for cond in [claim["metric"], *claim.get("also", [])]:
            exp = cond["experiment"]
            if exp not in results:
                results[exp] = smoke_result(exp, tmp_path)
            assert cond["key"] in results[exp].metrics, (exp, cond["key"])
        tornado = claim["assumed"]["experiment"]  # a model claim names its tornado, drawn at its target
        assert compose(tornado).params.target == claim["target"]
        metrics = smoke_result(tornado, tmp_path).metrics
        assert metrics["assumed_min"] <= metrics["assumed_base"] <= metrics["assumed_max"]


def chain(tmp: Path, first: str, second: str, inputs: dict | None = None, input_name: str = "nets") -> dict:
    """``first`` run (on ``inputs``), then ``second`` on its record (as input ``input_name``), each in a
    folder of ``tmp`` named for its experiment; {name: (result, figure)}."""
    a, b = first.split("/")[-1], second.split("/")[-1]
    for d in (a, b):
        (tmp / d).mkdir()
    out = {a: run(first, tmp / a, inputs=inputs, record=True)}
    out[b] = run(second, tmp / b, inputs={input_name: tmp / a / "record.json"}, record=True)
    return out
