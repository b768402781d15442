"""The arms end to end at smoke size on a tiny synthetic split, the pruned-model export, compare on
synthetic records, configs at both scales, and the figures."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from repro import records
from repro.papers.clicktrain import figures
from repro.papers.clicktrain.experiment import (ADMMParams, ClickTrainParams, CompareParams, PruneTrainParams,
                                         Sparse24Params, admm, clicktrain, compare, load_pruned, phase_epochs,
                                         prunetrain, sparse24)
from repro.data.arrays import read_split
from conftest import prepared_splits, experiment_cfg
from repro.experiment import Context, load_entry

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "experiment" / "clicktrain"
TINY = dict(model="resnet20", model_kw={"width": 4}, batch_size=32, n_train=128, channels_last=False,
            checkpoint=False)
ARMS = {
    "clicktrain": (clicktrain, ClickTrainParams(**{**TINY, "channels_last": True}, epochs=3)),  # GPU layout
    "admm": (admm, ADMMParams(**TINY, epochs=1, admm_epochs=1, retrain_epochs=1)),
    "prunetrain": (prunetrain, PruneTrainParams(**TINY, epochs=2, channel_threshold=1.5)),
    "sparse24": (sparse24, Sparse24Params(**TINY, epochs=2)),
}
COMMON = ("final_top1", "compression", "flops_ratio", "flops_dense", "flops_pruned", "e2e_s", "epoch_s_mean")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 160, 64)


@pytest.fixture(scope="module")
def runs(prepared, tmp_path_factory):
    out = {}
    for name, (fn, params) in ARMS.items():
        d = tmp_path_factory.mktemp(name)
        out[name] = (d, fn(params, Context(out_dir=d, scale="smoke", device="cpu", seed=1, inputs=prepared)))
    return out


def test_phase_epochs_scale_with_the_schedule():
    assert phase_epochs(40, 0.25, 0.25) == [10, 10, 20]
    assert phase_epochs(3, 0.25, 0.25) == [1, 1, 1]
    with pytest.raises(ValueError, match="no epoch after"):
        phase_epochs(2, 0.5, 0.5)


@pytest.mark.parametrize("name", list(ARMS))
def test_arm_smoke(runs, name):
    _, result = runs[name]
    m, epochs = result.metrics, result.tables["epochs"]
    for key in COMMON:
        assert key in m, key
    assert m["e2e_s"] >= epochs.train_s.sum() and list(epochs.epoch) == list(range(1, len(epochs) + 1))
    # the measured whole schedule: every phase's trainer call (training, evaluation, hooks) + pruning work
    assert m["schedule_s"] >= m["e2e_s"] and m["schedule_s"] >= (epochs.train_s + epochs.eval_s).sum()
    phases = {k for k in m if k.startswith("schedule_") and k.endswith("_s") and k != "schedule_s"}
    assert len(phases) == {"admm": 3}.get(name, 1)  # one per trainer call
    assert sum(m[k] for k in phases) + m["prune_s"] - epochs.hook_s.sum() == pytest.approx(m["schedule_s"])
    assert m["flops_dense"] / m["flops_pruned"] == pytest.approx(m["flops_ratio"])
    assert "eager" in result.tags["mode"]
    expected_phases = {"clicktrain": ["dense", "lasso", "masked"], "admm": ["dense", "admm", "retrain"],
                       "prunetrain": ["lasso"], "sparse24": ["dense", "masked"]}[name]
    assert list(dict.fromkeys(epochs.phase)) == expected_phases
    if name in ("clicktrain", "admm"):
        assert m["pattern_violations"] == 0 and m["patterns_in_library"] == 4
        # 75% of kernels dropped and 4 of 9 weights kept in the rest: about 9x on the pattern layers
        assert 7 < m["compression"] < 9.5 and m["flops_ratio"] > 5
    if name in ("clicktrain", "sparse24", "admm"):
        assert "dense_epoch_s" in m
    if name == "prunetrain":
        assert m["channel_sparsity"] > 0 and m["compression"] > 1 and m["mask_violations"] == 0
    if name == "sparse24":
        assert m["nm_violations"] == 0 and 1.8 < m["compression"] <= 2.0


def test_clicktrain_lr_is_one_schedule_across_its_phases(runs):
    """No restart and no new warm-up at a phase change: the lr at each epoch's last step is the one
    cosine schedule over the whole run's steps (the artifact: one MultiStepLR over all phases,
    cifar.py:206-208, 239), and the masked phase trained with mixup."""
    from repro.train.schedule import lr_at

    _, result = runs["clicktrain"]
    p, epochs = ARMS["clicktrain"][1], result.tables["epochs"]
    steps = 128 // p.batch_size  # n_train / batch, every batch full
    total = steps * len(epochs)
    expected = [lr_at(e * steps - 1, total, p.lr, p.warmup_epochs * steps, p.schedule) for e in epochs.epoch]
    assert list(epochs.lr) == pytest.approx(expected)
    assert list(epochs.phase) == ["dense", "lasso", "masked"]
    assert result.tags["mixup"] == "alpha 0.3 in the masked phase" and result.tags["lasso_groups"] == "artifact"


@pytest.mark.parametrize("name", list(ARMS))
def test_load_pruned_round_trip(runs, prepared, name):
    out_dir, result = runs[name]
    pruned = load_pruned(result.artifacts["pruned"])
    assert pruned.meta["arm"] == name and set(pruned.masks)
    assert (pruned.library is not None) == (name in ("clicktrain", "admm"))
    top1 = pruned.evaluate(read_split(prepared["test"]))
    assert top1 == pytest.approx(result.metrics["final_top1"], abs=100 / 64 + 1e-9)  # at most one image flips


def _write_record(d: Path, experiment: str, metrics: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    records.write(d, dict(experiment=experiment, paper="clicktrain", scale="smoke", status="ok", params={},
                          metrics=metrics, provenance={}, started="2025-01-01T00:00:00+00:00"))
    return d / "record.json"


def test_compare_on_synthetic_records(tmp_path):
    arm = dict(final_top1=91.0, compression=9.0, flops_ratio=7.0, e2e_s=100.0, epoch_s_mean=3.1, dense_epoch_s=3.0,
               time_dense_s=30.0, epochs_dense=10, time_masked_s=70.0, epochs_masked=30)
    inputs = {
        "clicktrain": _write_record(tmp_path / "ct", "clicktrain", arm),
        "admm": _write_record(tmp_path / "admm", "admm", {**arm, "e2e_s": 230.0, "final_top1": 91.3}),
        "prunetrain": _write_record(tmp_path / "pt", "prunetrain", {**arm, "final_top1": 90.0, "compression": 3.0}),
        "sparse24": _write_record(tmp_path / "s24", "sparse24", {**arm, "compression": 2.0}),
        "dense": _write_record(tmp_path / "dense", "resnet32", dict(final_top1=92.0, epoch_s_mean=1.55)),
    }
    result = compare(CompareParams(), Context(out_dir=tmp_path / "cmp", inputs=inputs))
    m = result.metrics
    assert m["e2e_speedup"] == pytest.approx(2.3)
    # records from before schedule_s: no measured-schedule ratio, and no epoch ratio without epochs
    assert math.isnan(m["schedule_speedup"]) and math.isnan(m["schedule_vs_prunetrain"])
    assert math.isnan(m["epoch_ratio"]) and "NaN" in result.tags["schedule_speedup"]
    assert m["epoch_overhead"] == pytest.approx(3.1 / 3.0)
    assert m["epoch_overhead_vs_baseline"] == pytest.approx(3.1 / 1.55)
    assert m["top1_vs_admm"] == pytest.approx(-0.3) and m["top1_vs_prunetrain"] == pytest.approx(1.0)
    assert m["compression_vs_prunetrain"] == pytest.approx(3.0) and m["compression"] == 9.0
    assert list(result.tables["arms"].arm) == ["dense", "clicktrain", "admm", "prunetrain", "sparse24"]
    assert set(result.tables["phases"].phase) == {"dense", "masked"}
    run = tmp_path / "cmp"
    run.mkdir()
    for name, table in result.tables.items():
        table.to_csv(run / f"{name}.csv", index=False)
    figures.compare(run)
    timed = {"clicktrain": dict(schedule_s=120.0, epochs=40), "admm": dict(schedule_s=300.0, epochs=80),
             "prunetrain": dict(schedule_s=150.0, epochs=40)}
    for name, extra in timed.items():
        metrics = records.read(inputs[name])["metrics"]
        inputs[name] = _write_record(tmp_path / f"{name}_timed", name, {**metrics, **extra})
    m = compare(CompareParams(), Context(out_dir=tmp_path / "cmp3", inputs=inputs)).metrics
    assert m["schedule_speedup"] == pytest.approx(2.5) and m["schedule_vs_prunetrain"] == pytest.approx(0.8)
    assert m["epoch_ratio"] == pytest.approx(2.0) and m["e2e_speedup"] == pytest.approx(2.3)
    del inputs["dense"]
    with pytest.raises(records.RecordError, match="inputs.dense is missing"):
        compare(CompareParams(), Context(out_dir=tmp_path / "cmp2", inputs=inputs))


@pytest.mark.parametrize("name", list(ARMS))
def test_arm_figures_render(runs, name, tmp_path):
    _, result = runs[name]
    result.tables["epochs"].to_csv(tmp_path / "epochs.csv", index=False)
    fig = getattr(figures, name)(tmp_path)
    assert len(fig.axes) == 2


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("[!_]*.yaml")))  # _*.yaml: abstract bases
def test_configs_validate_at_both_scales(name):
    from repro.pipeline.run import experiment_params

    cfg = experiment_cfg(f"clicktrain/{name}")
    assert cfg.paper == "clicktrain" and cfg.name == name
    spec = load_entry(cfg.entry)
    paper, smoke = experiment_params(spec, cfg, "paper"), experiment_params(spec, cfg, "smoke")
    module, _, fn = cfg.figure.partition(":")
    assert module == "repro.papers.clicktrain.figures" and hasattr(figures, fn)
    if name.endswith(("clicktrain_compare", "clicktrain_budget", "inference", "wide_compare")):
        return  # not training arms (test_budget.py, test_inference.py and test_wide.py check theirs)
    vgg, wide = name.startswith("vgg16_"), name.startswith("wide_")
    arm = name.removeprefix("vgg16_").removeprefix("wide_")
    assert arm in ARMS
    assert paper.model == ("vgg16" if vgg else "clicktrain_resnet32" if wide else "resnet32") and paper.epochs == 40
    assert paper.n_train == 0 and smoke.n_train == 256 and smoke.precision == "fp32"
    assert paper.precision == ("bf16" if vgg or wide else "fp32")  # bf16 for the wide networks, as VGG-16's baseline
    assert paper.cuda_graph  # every arm and phase captured, the baseline's mode: one mode for all epoch times
    if arm in ("clicktrain", "admm"):
        assert paper.patterns == (12 if vgg else 4) and paper.kernel_prune_ratio == 0.75
    if arm == "admm":
        assert (paper.admm_epochs, paper.retrain_epochs) == (20, 20)


def test_prunetrain_regulariser_in_and_out_channels_and_ratio():
    """PruneTrain's regulariser: output and input channel groups (not the first conv's input), groups
    whose largest |weight| is under the threshold masked (rows and columns), and the coefficient set
    so that the penalty is the requested share of the loss on the first batch."""
    import torch.nn as nn

    from repro.papers.clicktrain.experiment import lasso_for_ratio
    from repro.papers.clicktrain.masks import ChannelLassoHooks
    from repro.data.arrays import Split

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 10))
    names = ["0", "3"]
    out_only = ChannelLassoHooks(model, names, 1.0, 1e-4, 1)
    both = ChannelLassoHooks(model, names, 1.0, 1e-4, 1, in_channels=True, threshold_type="max")
    w0, w2 = model[0].weight, model[3].weight
    expect_out = w0.flatten(1).norm(dim=1).sum() + w2.flatten(1).norm(dim=1).sum()
    expect_in = w2.transpose(0, 1).flatten(1).norm(dim=1).sum()  # conv 0's input channels are the image's
    assert torch.allclose(out_only.group_lasso(model), expect_out)
    assert torch.allclose(both.group_lasso(model), expect_out + expect_in)
    with torch.no_grad():
        w2[:, 1] = 5e-5   # an input channel of conv 2 under the threshold (max |w|)
        w2[3] = -5e-5     # an output channel too
    both.on_epoch_end(model, 1, {})
    m = both.masks["3"]
    assert not m[:, 1].any() and not m[3].any() and int(m.sum()) == (6 - 1) * (4 - 1) * 9
    assert bool(both.masks["0"].all())  # nothing small there
    with pytest.raises(ValueError, match="threshold_type"):
        ChannelLassoHooks(model, names, 1.0, 1e-4, 1, threshold_type="mean")
    images = (torch.rand(16, 8, 8, 3) * 255).to(torch.uint8).numpy()
    split = Split(images=images, labels=torch.randint(0, 10, (16,)).numpy(), classes=tuple(str(i) for i in range(10)),
                  source="test")
    p = PruneTrainParams(**{**TINY, "batch_size": 16}, lasso_ratio=0.2)
    model[1].running_var.fill_(1e-4)  # running statistics far from the batch's: eval mode would not normalise
    bn_before = {k: v.clone() for k, v in model[1].state_dict().items()}
    model.eval()
    lam = lasso_for_ratio(model, both, split, p, "cpu")
    assert not model.training  # the mode it came in
    assert all(torch.equal(v, model[1].state_dict()[k]) for k, v in bn_before.items())  # running stats put back
    from repro.train.augment import first_batch
    x, y = first_batch(split, 16, "cpu")
    with torch.no_grad():
        ce_eval = float(nn.functional.cross_entropy(model(x), y))
        model.train()  # the first training step's loss: batch statistics
        ce = float(nn.functional.cross_entropy(model(x), y))
        penalty = lam * float(both.group_lasso(model))
    assert penalty / (penalty + ce) == pytest.approx(0.2, rel=1e-5)
    assert ce_eval > 1.5 * ce  # what eval mode would have used


class _KilledAfter(Context):
    """A context whose epoch loops stop (as a killed job would) once ``epochs`` epochs have finished."""

    def __init__(self, epochs: int, **kw):
        super().__init__(**kw)
        self.left = epochs

    def progress(self, iterable, total=None, desc=""):
        for item in iterable:
            if self.left == 0:
                raise KeyboardInterrupt("killed")
            self.left -= 1
            yield item


def test_a_resumed_arm_says_so_and_ends_as_an_uninterrupted_one(prepared, tmp_path):
    params = Sparse24Params(**{**TINY, "checkpoint": True}, epochs=3)  # 1 dense epoch, then 2 masked: one train() phase
    ctx = dict(scale="smoke", device="cpu", seed=1, inputs=prepared)
    straight = sparse24(params, Context(out_dir=tmp_path / "straight", **ctx))
    with pytest.raises(KeyboardInterrupt):
        sparse24(params, _KilledAfter(2, out_dir=tmp_path / "killed", **ctx))
    assert (tmp_path / "killed" / "checkpoint_sparse24.pt").is_file()
    resumed = sparse24(params, Context(out_dir=tmp_path / "killed", **ctx))
    assert straight.tags["resumed"] == "none"
    assert resumed.tags["resumed"].startswith("sparse24 after epoch 2 from its checkpoint")
    assert resumed.metrics["final_top1"] == straight.metrics["final_top1"]
    assert resumed.metrics["compression"] == straight.metrics["compression"]
    assert not list((tmp_path / "killed").glob("checkpoint_*.pt"))  # finished: removed


def test_block_ratios_follow_the_artifact_stages():
    """One ratio per residual block, both of its 3x3 convs; the stem and the 1x1 shortcuts untouched;
    ratio_scale multiplies every layer's ratio (the compression sweep's knob)."""
    from repro.models import build_model
    from repro.papers.clicktrain.experiment import _pattern_setup

    model = build_model("clicktrain_resnet32", width=4, blocks=[1, 1, 1, 1])
    p = ClickTrainParams(model="clicktrain_resnet32", block_ratios=[0.55, 0.65, 0.75, 0.75])
    convs, ratios = _pattern_setup(p, model)
    assert len(convs) == 8 and sorted(set(ratios.values())) == [0.55, 0.65, 0.75]
    assert [ratios[n] for n in convs] == [0.55, 0.55, 0.65, 0.65, 0.75, 0.75, 0.75, 0.75]
    _, scaled = _pattern_setup(ClickTrainParams(block_ratios=[0.55, 0.65, 0.75, 0.75], ratio_scale=0.5), model)
    assert [scaled[n] for n in convs] == pytest.approx([r / 2 for r in ratios.values()])
    with pytest.raises(ValueError, match="4 residual blocks"):
        _pattern_setup(ClickTrainParams(block_ratios=[0.5, 0.5]), model)
    with pytest.raises(ValueError, match="or 'artifact'"):
        _pattern_setup(ClickTrainParams(block_ratios="paper"), model)


def test_artifact_block_ratios_by_stage():
    """configs/cifar10_resnet32_v1.yaml:64-94 of the artifact: layer1 55, layer2 and layer3.0 65, the rest 75."""
    from repro.papers.clicktrain.patterns import artifact_block_ratios

    assert artifact_block_ratios([3, 4, 5, 3]) == [0.55] * 3 + [0.65] * 5 + [0.75] * 7
    assert artifact_block_ratios([1, 1, 2, 1]) == [0.55, 0.65, 0.65, 0.75, 0.75]
    with pytest.raises(ValueError, match="4 stages"):
        artifact_block_ratios([3, 3, 3])
