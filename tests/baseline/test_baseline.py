"""Baseline arm: experiments at smoke scale on a tiny prepared split, configs valid, figures render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from repro.papers.baseline import figures
from repro.train.arm import TrainParams
from repro.papers.baseline.experiment import BenchParams, train_cifar, trainer_bench
from repro.data.arrays import DataError
from conftest import prepared_splits, experiment_cfg
from repro.experiment import Context, load_entry

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "experiment" / "baseline"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 160, 64)


def _ctx(tmp_path, prepared):
    return Context(out_dir=tmp_path, scale="smoke", device="cpu", seed=3, inputs=prepared)


def test_train_cifar_smoke(tmp_path, prepared):
    p = TrainParams(model="resnet20", model_kw={"width": 4}, epochs=2, batch_size=32, n_train=128)
    result = train_cifar(p, _ctx(tmp_path, prepared))
    m = result.metrics
    for key in ("final_top1", "best_top1", "epoch_s_mean", "images_per_s", "total_train_s", "peak_mem_bytes",
                "n_train_images", "epochs"):
        assert key in m, key
    assert m["n_train_images"] == 128 and m["n_test_images"] == 64 and m["epochs"] == 2
    assert m["epoch_s_mean"] == result.tables["epochs"].train_s.iloc[1]  # epoch 1 excluded
    assert result.tags["mode"] == "eager" and result.tags["seed"] == 3
    assert not (tmp_path / "checkpoint.pt").exists()  # removed once finished
    weights = torch.load(result.artifacts["model"], weights_only=True)
    assert "0.weight" in weights  # flat Sequential: the stem conv


def test_missing_inputs_are_named(tmp_path):
    with pytest.raises(DataError, match="inputs.train is missing"):
        train_cifar(TrainParams(), Context(out_dir=tmp_path))


def test_trainer_bench_smoke(tmp_path, prepared, capsys):
    p = BenchParams(model="resnet20", model_kw={"width": 4}, epochs=2, ref_epochs=2, ref_workers=0,
                    batch_size=32, n_train=128, n_test=32)
    result = trainer_bench(p, _ctx(tmp_path, prepared))
    m = result.metrics
    assert m["speedup"] == pytest.approx(m["ours_images_per_s"] / m["reference_images_per_s"])
    table = result.tables["bench"]
    assert sorted(table.loop.unique()) == ["ours", "reference"] and table.warmup.sum() == 2
    assert "speedup" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["resnet32", "vgg16", "trainer_bench", "airbench"])
def test_configs_validate_at_both_scales(name):
    from repro.pipeline.run import experiment_params

    cfg = experiment_cfg(f"baseline/{name}")
    assert cfg.paper == "baseline" and cfg.name == name
    spec = load_entry(cfg.entry)
    paper, smoke = experiment_params(spec, cfg, "paper"), experiment_params(spec, cfg, "smoke")
    # the ResNet-32 smoke run trains on enough images to show learning (tests/test_smoke_dag.py checks
    # it did); the others stay tiny
    assert paper.n_train == 0 and smoke.n_train == (2560 if name == "resnet32" else 256)
    assert paper.cuda_graph and not smoke.cuda_graph
    module, _, fn = cfg.figure.partition(":")
    assert module == "repro.papers.baseline.figures" and hasattr(figures, fn)


def test_airbench_smoke_whitens_then_trains(tmp_path, prepared):
    """The experiment's own smoke params (shortened), through train_cifar: the whitening layer is set
    from the training images before training, and the airbench options run together."""
    import dataclasses

    from repro.pipeline.run import experiment_params

    cfg = experiment_cfg("baseline/airbench")
    spec = load_entry(cfg.entry)
    paper = experiment_params(spec, cfg, "paper")
    assert (paper.model, paper.batch_size, paper.lookahead_every, paper.freeze) == ("airbench94", 1024, 5,
                                                                                   {"whiten.bias": 3})
    p = dataclasses.replace(experiment_params(spec, cfg, "smoke"), n_train=128, epochs=1)
    result = train_cifar(p, _ctx(tmp_path, prepared))
    assert result.metrics["whitened_on_images"] == 128 and result.metrics["epochs"] == 1
    w = torch.load(result.artifacts["model"], weights_only=True)["whiten.weight"]
    assert torch.equal(w[12:], -w[:12]) and w.abs().max() > 1.0  # whitened (default init is below 0.3)


def test_figures_render(tmp_path, prepared):
    run = tmp_path / "run"
    run.mkdir()
    p = TrainParams(model="resnet20", model_kw={"width": 4}, epochs=2, batch_size=32)
    result = train_cifar(p, _ctx(run, prepared))
    result.tables["epochs"].to_csv(run / "epochs.csv", index=False)
    (run / "record.json").write_text(json.dumps({"scale": "smoke", "device": "cpu", "tags": result.tags}))
    figures.train_cifar(run).savefig(tmp_path / "train.png")
    bench = trainer_bench(BenchParams(model="resnet20", model_kw={"width": 4}, epochs=2, ref_epochs=2,
                                      ref_workers=0, batch_size=32, n_test=32), _ctx(run, prepared))
    bench.tables["bench"].to_csv(run / "bench.csv", index=False)
    figures.trainer_bench(run).savefig(tmp_path / "bench.png")
    assert (tmp_path / "train.png").stat().st_size > 10_000 and (tmp_path / "bench.png").stat().st_size > 5_000
