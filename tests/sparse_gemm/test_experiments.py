"""The experiments at smoke scale on the CPU: the benchmark harness (Triton interpreter) gives every
method's row and the claims' metrics, the pruning arms train, hold their pattern and land on their
sparsity, the comparison reads the arms' records; configs (variants through defaults) are valid,
bad parameters fail naming the key, and the figures draw."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from conftest import prepared_splits
from repro import records
from repro import layout
from repro.experiment import Context, load_entry
from repro.papers.sparse_gemm import arms, figures
from repro.papers.sparse_gemm.bench import METHODS, BenchParams, validate

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "experiment" / "sparse_gemm"


def experiment_config(name: str) -> dict:
    """An experiment file with its `defaults:` base merged under it, as Hydra composes it."""
    return layout.experiment_file(f"sparse_gemm/{name}")


def params(name: str, scale: str):
    cfg = experiment_config(name)
    spec = load_entry(cfg["entry"])
    values = dict(cfg["params"], **(cfg.get("smoke") or {})) if scale == "smoke" else cfg["params"]
    return spec, spec.params(**values), cfg


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_configs_are_valid(name):
    cfg = experiment_config(name)
    assert cfg["name"] == name and cfg["paper"] == "sparse_gemm"
    for scale in ("paper", "smoke"):
        spec, p, cfg = params(name, scale)
        if isinstance(p, arms.PruneArmParams):
            arms.validate(p)
        elif isinstance(p, BenchParams):
            validate(p)
    assert cfg["gpus"] == (0 if name == "vgg16_accuracy" else 1)


def test_accuracy_compare_reads_every_arm():
    cfg = experiment_config("vgg16_accuracy")
    arm_files = {p.stem for p in CONFIGS.glob("vgg16_*.yaml")} - {"vgg16_accuracy"}
    assert {Path(v).parent.name for k, v in cfg["inputs"].items() if k != "dense"} == arm_files


@pytest.mark.slow
def test_bench_smoke_on_cpu(tmp_path):
    spec, p, _ = params("gemm_bench", "smoke")
    result = spec(p, Context(out_dir=tmp_path, scale="smoke", device="cpu"))
    df = result.tables["points"]
    n_points = len(p.shapes) * len(p.dtypes) * len(p.sparsities)
    assert len(df) == n_points * len(METHODS) and set(df.method) == set(METHODS)
    ran = df[df.t_us.notna()]
    assert set(ran.method) >= {"dense", "ideal", "tw", "sbw", "tvw_dense_mma"}
    assert bool(ran.ok.all()), ran[~ran.ok]
    assert result.metrics["n_incorrect"] == 0
    for key in ("tw_min_frac_ideal_75", "sbw_geomean_speedup_75", "tw_min_speedup_75", "ideal_geomean_speedup_75"):
        assert key in result.metrics and math.isfinite(result.metrics[key]), key
    ours = df[df.method.isin(["tw", "sbw"])]
    assert ((ours.density - (1 - ours.sparsity)).abs() < 0.02).all()
    # the tuner's choices: cached in the run folder and tabled for the record
    assert len(result.tables["tuning"]) == 3 * n_points + len(p.shapes) * len(p.dtypes)  # + identity per shape
    # the kernel-quality ceiling: our kernel on the unpruned layer, beside every point of its shape
    ident = df[df.method == "identity"]
    assert (ident.density == 1.0).all() and bool(ident.ok.all())
    assert (df.kernel_quality - df.t_dense_us / df.t_identity_us).abs().max() < 1e-12
    assert math.isfinite(result.metrics["identity_min_quality"])
    assert "identity_min_quality_big" not in result.metrics  # the smoke shape is far below 2^32
    assert json.loads((tmp_path / "tuning.json").read_text())["gpus"]["cpu"]
    assert "CPU" in result.tags["timing"]
    df.to_csv(tmp_path / "points.csv", index=False)
    figures.gemm_bench(tmp_path)


def test_bench_rejects_bad_params():
    with pytest.raises(ValueError, match="shapes"):
        validate(BenchParams(shapes=[[10, 10]]))
    with pytest.raises(ValueError, match="sparsities"):
        validate(BenchParams(sparsities=[0.25]))
    with pytest.raises(ValueError, match="dtypes"):
        validate(BenchParams(dtypes=["float32"]))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 96, 32)


def _arm_params(pattern, sparsity, **kw):
    return arms.PruneArmParams(model="cifar_resnet", model_kw={"depth": 8, "width": 4}, epochs=4, batch_size=32,
                               n_train=32, n_test=32, cuda_graph=False, channels_last=False, pattern=pattern, sparsity=sparsity, tile=8,
                               vector=4, warmup_epochs=0, prune_frac=0.5, **kw)


@pytest.mark.parametrize("pattern,sparsity", [("tw", 0.75), ("sbw", 0.75), ("unstructured", 0.875), ("nm", 0.5),
                                              ("tvw", 0.75)])
def test_prune_arm_smoke(tmp_path, prepared, pattern, sparsity):
    p = _arm_params(pattern, sparsity)
    result = arms.prune_arm(p, Context(out_dir=tmp_path, scale="smoke", device="cpu", inputs=prepared))
    m = result.metrics
    assert m["pattern_violations"] == 0 and m["weights_outside_mask"] == 0
    assert abs(m["sparsity"] - sparsity) < 0.03, m["sparsity"]
    second = "masked" if pattern == "nm" else "pruning"  # 2:4 prunes once; the others in two steps
    assert list(result.tables["epochs"].phase) == ["dense", second, "masked", "masked"]
    assert result.tags["pattern"] == pattern and (tmp_path / "model.pt").exists()
    result.tables["epochs"].to_csv(tmp_path / "epochs.csv", index=False)
    figures.prune_arm(tmp_path)


def test_schedule_ramps_to_the_target():
    steps = arms.schedule(dataclasses.replace(_arm_params("tw", 0.75), epochs=40, warmup_frac=0.25,
                                              prune_frac=0.25))
    assert [e for e, _ in steps] == list(range(10, 20))
    assert steps[-1][1] == pytest.approx(0.75) and all(a < b for (_, a), (_, b) in zip(steps, steps[1:]))
    assert [s for _, s in arms.schedule(_arm_params("nm", 0.5))] == [0.5]
    assert arms.schedule(_arm_params("tvw", 0.75))[0][1] >= 0.5
    with pytest.raises(ValueError, match="pattern"):
        arms.validate(_arm_params("block", 0.5))
    with pytest.raises(ValueError, match="sparsity"):
        arms.validate(_arm_params("tvw", 0.3))
    with pytest.raises(ValueError, match="epochs"):
        arms.validate(dataclasses.replace(_arm_params("tw", 0.5), epochs=1))


def test_layout_hooks_state_round_trip():
    from repro.models import build_model
    from repro.papers.sparse_gemm import patterns

    model = build_model("cifar_resnet", depth=8, width=4)
    names, classifier = arms.pruned_layers(model)
    modules = dict(model.named_modules())

    def make(m, epoch):
        scores = {n: patterns.gemm_view(modules[n].weight.detach()).abs() for n in names}
        return patterns.prune("sbw", scores, 0.5, vector=4)

    hooks = arms.LayoutHooks([1], make)
    hooks.on_epoch_end(model, 1, {})
    restored = arms.LayoutHooks([1], make)
    restored.load_state_dict(hooks.state_dict())
    for n in names:
        assert patterns.check(restored.layouts[n]) == []
        assert torch.equal(restored.layouts[n].mask, hooks.layouts[n].mask)


def _fake_record(directory: Path, metrics: dict, tags: dict) -> Path:
    directory.mkdir(parents=True)
    return records.write(directory, dict(experiment=directory.name, paper="sparse_gemm", scale="smoke", status="ok",
                                         params={}, metrics=metrics, provenance={}, started="now", tags=tags))


def test_compare_reads_the_arms(tmp_path):
    inputs = {"dense": _fake_record(tmp_path / "dense", {"final_top1": 90.0}, {})}
    for pattern, s, top1 in (("tw", 0.75, 89.5), ("sbw", 0.75, 89.0), ("tw", 0.875, 88.0), ("nm", 0.5, 89.9)):
        name = f"{pattern}_{s}"
        inputs[name] = _fake_record(tmp_path / name, {"final_top1": top1, "sparsity": s, "target_sparsity": s},
                                    {"pattern": pattern})
    result = arms.compare(arms.CompareParams(), Context(out_dir=tmp_path, inputs=inputs))
    m = result.metrics
    assert m["tw_top1_vs_dense_75"] == pytest.approx(-0.5) and m["tw_top1_87p5"] == 88.0
    assert m["nm_top1_vs_dense_50"] == pytest.approx(-0.1) and len(result.tables["arms"]) == 5
    result.tables["arms"].to_csv(tmp_path / "arms.csv", index=False)
    figures.compare(tmp_path)
    with pytest.raises(records.RecordError, match="dense"):
        arms.compare(arms.CompareParams(), Context(out_dir=tmp_path, inputs={}))
    with pytest.raises(records.RecordError, match="missing"):
        arms.compare(arms.CompareParams(arms=["tw_9"]), Context(out_dir=tmp_path, inputs={"dense": inputs["dense"]}))


def test_ideal_sizes_round_to_whole_tiles():
    """The shrunk ideal runs on multiples of 64 (543 = sqrt(0.5) x 768 ran at 0.87x dense's rate),
    the nearest ones, and the benchmark scales its time by the useful work over K2 x N2."""
    from repro.papers.sparse_gemm.bench import ideal_sizes

    assert ideal_sizes(768, 3072, 0.5) == (512, 2176)  # 543.1 -> 512, 2172.2 -> 2176
    assert ideal_sizes(768, 768, 0.75) == (384, 384)
    assert ideal_sizes(4096, 11008, 0.875) == (1472, 3904)  # 1448.2 -> 1472, 3891.9 -> 3904
    assert ideal_sizes(70, 150, 0.75) == (64, 64)  # 35 and 75 round to at least one tile
    assert ideal_sizes(33, 20, 0.5) == (23, 14)  # below one tile: rounded, not padded


def test_bert_layer_speedup_weights_each_gemm_by_its_count():
    """The papers' statistic: one encoder layer's GEMM time, dense over the method's, the 768 x 768
    GEMM counted four times (Q, K, V, output); absent when a GEMM of the layer did not run."""
    import pandas as pd

    from repro.papers.sparse_gemm.bench import bert_layer_speedups

    bt = pd.DataFrame({"dense": [10.0, 40.0, 40.0], "tw": [5.0, 10.0, 30.0], "sbw": [float("nan"), 1.0, 1.0]},
                      index=pd.MultiIndex.from_tuples([(768, 768), (768, 3072), (3072, 768)], names=["k", "n"]))
    got = bert_layer_speedups(bt)
    assert got["tw_bert_layer_speedup_75_fp16"] == pytest.approx((4 * 10 + 40 + 40) / (4 * 5 + 10 + 30))
    assert "sbw_bert_layer_speedup_75_fp16" not in got  # one GEMM missing: no layer time
    assert bert_layer_speedups(bt.drop(index=(3072, 768))) == {}
