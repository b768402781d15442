"""The SuperNeurons largest-batch experiment at smoke scale on the CPU (liveness estimates decide the
fits): through the runner, its metrics and figure, a killed run resumed from the probe cache, the
search ceiling, the paper config's time budget, and arms that cannot run a network."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO, experiment_cfg
from repro import records
from repro.experiment import Context, load_entry
from repro.figures import draw
from repro.models import build_model
from repro.papers.superneurons import experiment as ex
from repro.papers.superneurons.arms import Arm, Optim, unsupported
from repro.papers.superneurons.experiment import PAPER_NETWORKS, MaxBatchParams, max_batch, search_largest
from repro.papers.superneurons.liveness import flatten_units

CONFIG = REPO / "config" / "experiment" / "superneurons" / "max_batch.yaml"
VGG_TINY = {"name": "vgg_tiny", "model": "vgg11", "kw": {"width": 0.0625}, "image_size": 32}
RESNET_TINY = {"name": "resnet_tiny", "model": "bottleneck_resnet", "kw": {"blocks": [1, 1, 1, 1], "width": 4},
               "image_size": 32}
# one tiny network, a 4 MiB cap (plain stops near 40, ours near 110), no budget in the way
TINY = dict(networks=[RESNET_TINY], cap_gib=0.004, isolate=False, num_classes=10, start_batch={"plain": 8, "ours": 8},
            max_batch=512, resolution=0.25, budget_s={"plain": 60, "ours": 60})


def test_smoke_run_through_the_runner(compose, tmp_path):
    """experiment=superneurons/max_batch scale=smoke as `python -m repro.pipeline.run` composes it: per
    (network, arm) the largest batch, ours / plain per network and over them, all under est_ keys
    (no allocator on the CPU), a bracketed (exact) search, both tables and the figure."""
    from repro.pipeline.run import execute

    out = tmp_path / "run"
    # the smoke budgets (10 s per arm) cut the search on a loaded machine (tag "time"); this test is about
    # the bracketing, so the clock must not decide it: a budget no search here comes near, set in the
    # smoke section, which is merged over params at this scale
    execute(compose(["experiment=superneurons/max_batch", "scale=smoke", "device=cpu", f"out={out}",
                     "experiment.smoke.budget_s.plain=3600", "experiment.smoke.budget_s.ours=3600"]))
    rec = records.read(out)
    m = rec["metrics"]
    nets = ["vgg_tiny", "resnet_tiny"]
    assert not [k for k in m if not k.startswith("est_")]
    for net in nets:
        plain, ours = m[f"est_max_batch_{net}_plain"], m[f"est_max_batch_{net}_ours"]
        assert 8 <= plain < ours < 512  # bracketed below the ceiling: the cap decides
        assert m[f"est_batch_ratio_{net}"] == pytest.approx(ours / plain)
        assert rec["tags"][f"bound_{net}_plain"] == rec["tags"][f"bound_{net}_ours"] == "exact"
    ratios = [m[f"est_batch_ratio_{net}"] for net in nets]
    assert (m["est_batch_ratio_min"], m["est_batch_ratio_max"]) == (min(ratios), max(ratios))
    assert rec["tags"]["memory_source"].startswith("liveness estimate")
    assert sorted(rec["tables"]) == ["max_batch.csv", "max_batch_probes.csv"]
    assert not (out / ex.PROBE_CACHE).exists() and "resumed_probes" not in rec["tags"]
    draw(out, tmp_path / "max_batch.png")
    assert (tmp_path / "max_batch.png").stat().st_size > 10_000


def test_summary_brackets_every_maximum(tmp_path):
    """Each search's maximum fits and (resolution 0.25) a failing batch lies within 25% above it; the
    probes table has every probe of every search."""
    result = max_batch(MaxBatchParams(**TINY), Context(out_dir=tmp_path, device="cpu"))
    summary, probes = result.tables["max_batch"], result.tables["max_batch_probes"]
    assert list(summary.columns[:7]) == ["network", "arm", "max_batch", "min_fail_batch", "bound", "limited_by",
                                         "probes"]
    for r in summary.itertuples():
        mine = probes[(probes.network == r.network) & (probes.arm == r.arm)]
        assert len(mine) == r.probes and mine.set_index("batch_size").fits[r.max_batch]
        assert r.max_batch < r.min_fail_batch <= 1.25 * r.max_batch and r.limited_by == "estimate over cap"
        assert not mine[mine.batch_size > r.max_batch].fits.any()


def test_a_killed_run_resumes_from_its_probe_cache(tmp_path, monkeypatch):
    """A run killed after a few probes leaves them in probe_cache.jsonl; the next run takes them
    instead of probing again, finds the same maxima, tags it and removes the file."""
    calls = []
    real = ex.run_probe
    monkeypatch.setattr(ex, "run_probe", lambda spec: calls.append((spec.arm, spec.batch_size)) or real(spec))
    clean = max_batch(MaxBatchParams(**TINY), Context(out_dir=tmp_path / "clean", device="cpu"))
    total = len(calls)

    class Killed(BaseException):
        """The device call's time limit, as far as the experiment can tell."""

    def dies_after_five(spec):
        if len(calls) == 5:
            raise Killed
        return calls.append((spec.arm, spec.batch_size)) or real(spec)

    calls.clear()
    monkeypatch.setattr(ex, "run_probe", dies_after_five)
    with pytest.raises(Killed):
        max_batch(MaxBatchParams(**TINY), Context(out_dir=tmp_path / "run", device="cpu"))
    assert len((tmp_path / "run" / ex.PROBE_CACHE).read_text().splitlines()) == 5
    done = list(calls)
    calls.clear()
    monkeypatch.setattr(ex, "run_probe", lambda spec: calls.append((spec.arm, spec.batch_size)) or real(spec))
    again = max_batch(MaxBatchParams(**TINY), Context(out_dir=tmp_path / "run", device="cpu"))
    assert len(calls) == total - 5 and not set(calls) & set(done)
    assert again.tags["resumed_probes"].startswith("5 probes")
    assert again.metrics == clean.metrics
    cols = ["network", "arm", "max_batch", "min_fail_batch", "bound", "probes"]
    assert again.tables["max_batch"][cols].equals(clean.tables["max_batch"][cols])
    assert not (tmp_path / "run" / ex.PROBE_CACHE).exists()


def test_the_search_stops_at_the_ceiling(tmp_path):
    """Where everything fits, no probe goes past max_batch, the ceiling is the answer and the bound
    says it is one (the ratio is then a lower bound)."""
    p = MaxBatchParams(**{**TINY, "cap_gib": 1.0, "max_batch": 24, "start_batch": {"plain": 5, "ours": 5}})
    result = max_batch(p, Context(out_dir=tmp_path, device="cpu"))
    assert result.tables["max_batch_probes"].batch_size.max() == 24
    assert list(result.tables["max_batch"].bound) == ["ceiling", "ceiling"]
    assert result.metrics["est_max_batch_resnet_tiny_ours"] == 24 == result.metrics["est_max_batch_resnet_tiny_plain"]
    best, bound, probes = search_largest(lambda n: {"fits": True, "reason": "ok"}, 100, 1, 4096, 0.1, 60, "batch_size")
    assert (best, bound) == (4096, "ceiling") and max(r["batch_size"] for r in probes) == 4096


def test_bad_arms_and_tables_are_refused_before_any_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "run_probe", lambda spec: pytest.fail("a probe ran"))
    ctx = Context(out_dir=tmp_path, device="cpu")
    with pytest.raises(ValueError, match=r"arms: unknown arm\(s\) \['magic'\]"):
        max_batch(MaxBatchParams(**{**TINY, "arms": ["plain", "magic"]}), ctx)
    with pytest.raises(ValueError, match="'checkpoint' does not apply to network vgg_tiny .*in place"):
        max_batch(MaxBatchParams(**{**TINY, "networks": [RESNET_TINY, VGG_TINY], "arms": ["plain", "checkpoint"]}),
                  ctx)
    with pytest.raises(ValueError, match="budget_s.resnet_tyny"):  # a misspelt network
        max_batch(MaxBatchParams(**{**TINY, "budget_s": {"plain": 1, "ours": 1, "resnet_tyny": {"ours": 5}}}), ctx)
    with pytest.raises(ValueError, match="start_batch: no value for arm 'ours'"):
        max_batch(MaxBatchParams(**{**TINY, "start_batch": {"plain": 8}}), ctx)


def test_checkpoint_applies_to_resnets_and_alexnet_not_vgg():
    """checkpoint_sequential's segments must not start at an in-place layer (VGG-16's ReLUs); the
    runtime's arms and the others run any Sequential model. Arm refuses it with the reason."""
    for net in PAPER_NETWORKS:
        with torch.device("meta"):
            units = flatten_units(build_model(net["model"]))
        assert (unsupported("checkpoint", units) is None) == (net["name"] != "vgg16"), net["name"]
        assert all(unsupported(arm, units) is None for arm in ("plain", "save_on_cpu", "ours"))
    with pytest.raises(ValueError, match="arm 'checkpoint' cannot train this model"):
        Arm("checkpoint", build_model("vgg11", 10, width=0.0625), Optim())


def test_config_validates_and_its_paper_budgets_fit_one_gpu_call():
    """Both scales validate; the paper run's search budgets (10 searches) sum to at most 420 s, so the
    whole experiment fits one 10-minute device call with start-up to spare, and every paper network
    has its own start and budget."""
    from repro.pipeline.run import experiment_params

    cfg = experiment_cfg("superneurons/max_batch")
    spec = load_entry(cfg.entry)
    paper, smoke = experiment_params(spec, cfg, "paper"), experiment_params(spec, cfg, "smoke")
    assert cfg.figure == "repro.papers.superneurons.figures:max_batch"
    assert paper.isolate and paper.cap_gib == 12.0 and paper.networks == PAPER_NETWORKS
    names = [n["name"] for n in PAPER_NETWORKS]
    paper.check(names)
    budgets = {(net, arm): paper.per_search("budget_s", net, arm) for net in names for arm in paper.arms}
    assert sum(budgets.values()) <= 420
    assert all(arm in paper.budget_s[net] and arm in paper.start_batch[net] for net in names for arm in paper.arms)
    assert not smoke.isolate and smoke.cap_gib < 0.01 and len(smoke.networks) == 2
