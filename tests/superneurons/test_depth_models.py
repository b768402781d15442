"""The depth search over the ViT and GPT-decoder families with every arm (tiny, CPU: fits decided by
the liveness estimate against the cap, as the ResNet smoke depth), its refusals, the sac / amb
estimates it decides by, and the claims rows (sn.depth_vit, sn.depth_gpt) reading its record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from repro import records
from repro.report import claims
from repro.experiment import Context
from repro.layout import config_dir
from repro.papers.superneurons.arms import Arm, Optim
from repro.papers.superneurons.experiment import DEPTH_FAMILIES, DepthParams, depth
from repro.papers.superneurons.figures import depth as depth_figure
from repro.papers.superneurons.liveness import profile_units
from repro.papers.superneurons.probe import ProbeSpec, run_probe

ARMS = ["plain", "checkpoint", "save_on_cpu", "sac", "amb_0.5", "ours"]
VIT_KW = dict(image_size=16, patch=4, width=16, heads=2, mlp=32)
GPT_KW = dict(context=16, width=16, heads=2)
NETS = [{"name": "vit", "family": "vit", "kw": VIT_KW, "image_size": 16, "max_depth": 12},
        {"name": "gpt", "family": "gpt", "kw": GPT_KW, "image_size": 16, "max_depth": 12}]
CAP_GIB = 0.0004  # ~430 kB: plain fits a few layers of either family, ours the ceiling
TINY = dict(batch_size=2, num_classes=10, steps=1, isolate=False, cap_gib=CAP_GIB, min_blocks=1, resolution=0.5)


PROVENANCE = {"gpu_name": None, "commit": "c0ffee", "dirty": False, "config_hash": "x", "hostname": "h"}


def _record(**kw) -> dict:
    return dict(experiment="depth_models", paper="superneurons", params={}, tags={}, provenance=PROVENANCE,
                started="2026-12-03T00:00:00+00:00", status="ok", **kw)


# amb compiles through the partitioner at every probe (1-3.5 s each, 12 s of a search from 2 layers):
# it starts at 8, next to where it stops fitting under the cap (12 layers of the ViT, 8 of the GPT)
START = {**{a: 2 for a in ARMS}, "amb_0.5": 8}


def _params(**kw) -> DepthParams:
    return DepthParams(**{**TINY, "arms": ARMS, "networks": NETS, "start_blocks": START,
                          "arm_budget_s": {a: 120 for a in ARMS}, **kw})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("depth_models")
    result = depth(_params(), Context(out_dir=out))
    return out, result


@pytest.mark.parametrize("net", ["vit", "gpt"])
def test_every_arm_searches_the_family_depth_knob(run, net):
    _, result = run
    table = result.tables["depth"].set_index(["network", "arm"]).loc[net]
    assert list(table.index) == ARMS
    assert set(table.unit) == {DEPTH_FAMILIES[net].unit} and set(table.family) == {DEPTH_FAMILIES[net].model}
    assert (table.max_depth > 0).all()
    m = result.metrics
    for arm in ARMS:
        assert m[f"est_max_depth_{net}_{arm}"] == table.loc[arm, "max_depth"]
        assert result.tags[f"bound_{arm}_{net}"] == table.loc[arm, "bound"]
    # plain runs out under the cap, ours goes on to the ceiling: the ratio is what the claim reads
    assert table.loc["plain", "bound"] == "exact" and table.loc["plain", "min_fail_depth"] > 0
    assert table.loc["ours", "bound"] == "ceiling" and table.loc["ours", "max_depth"] == 12
    assert m[f"est_depth_ratio_{net}"] == 12 / table.loc["plain", "max_depth"] > 1
    assert m[f"est_depth_ratio_{net}_low"] == 12 / table.loc["plain", "min_fail_depth"]
    for arm in ("checkpoint", "save_on_cpu", "sac", "amb_0.5"):
        assert f"est_depth_ratio_vs_{arm}_{net}" in m
    assert "depth_ratio" not in m and "est_max_blocks_plain" not in m  # the ResNet's names stay its own


@pytest.mark.parametrize("net", ["vit", "gpt"])
def test_fits_are_the_liveness_estimate_against_the_cap(run, net):
    """Every probe of every arm, sac and amb included, fits exactly when its estimate is under the
    cap (no arm fits for want of an estimate), and the search's maximum is its largest fit."""
    _, result = run
    probes = result.tables["depth_probes"]
    probes = probes[probes.network == net]
    cap = CAP_GIB * 2**30
    assert set(probes.arm) == set(ARMS)
    assert (probes.fits == (probes.est_peak_bytes <= cap)).all()
    assert (probes[~probes.fits].reason == "estimate over cap").all()
    best = probes[probes.fits].groupby("arm").depth.max()
    table = result.tables["depth"].set_index(["network", "arm"]).loc[net]
    assert (best == table.max_depth[best.index]).all()
    for arm in ("sac", "amb_0.5"):  # without their estimate every probe "fitted": ceiling each time
        assert not probes[probes.arm == arm].fits.all()


def test_the_figure_draws_each_family(run):
    out, result = run
    for name, table in result.tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    records.write(out, {**_record(scale="smoke", metrics=result.metrics), "params": {"cap_gib": CAP_GIB}})
    fig = depth_figure(out)
    assert len(fig.axes) == 4  # bars and probes, per network


def test_sac_and_amb_estimates():
    """sac keeps less than plain (what it recomputes) and more than nothing; amb_<v> keeps v of what
    plain saves, so amb_1 is plain's estimate and amb_0.5 less."""
    torch.manual_seed(0)
    x = torch.zeros(2, 3, 16, 16)
    est = {}
    for arm in ("plain", "sac", "amb_1", "amb_0.5"):
        from repro.models import build_model
        model = build_model("vit_b16", 10, depth=3, **VIT_KW)
        a = Arm(arm, model, Optim())
        profiles = profile_units(a.ensure_units(x), x)
        est[arm] = a.estimated_dynamic(profiles, x)
    assert 0 < est["sac"] < est["plain"]
    assert est["amb_1"] == pytest.approx(est["plain"]) and est["amb_0.5"] < est["plain"]
    with pytest.raises(ValueError, match="sac arm's estimate needs the input"):
        a = Arm("sac", build_model("vit_b16", 10, depth=1, **VIT_KW), Optim())
        a.estimated_dynamic(profile_units(a.ensure_units(x), x))


def test_sac_probe_over_the_cap_is_refused_on_the_cpu():
    spec = dict(model="gpt2_small", model_kw={"depth": 12, **GPT_KW}, batch_size=2, image_size=16, num_classes=10,
                steps=1, cap_bytes=CAP_GIB * 2**30)
    for arm in ("sac", "amb_0.5"):
        r = run_probe(ProbeSpec(arm=arm, **spec))
        assert (r["fits"], r["reason"]) == (False, "estimate over cap")


@pytest.mark.parametrize("kw, needle", [
    ({"arms": ["plain", "bogus"]}, "'bogus'"),
    ({"arms": ["plain", "amb_2"]}, "amb_2"),
    ({"networks": [{"name": "r", "family": "lstm"}]}, "unknown family 'lstm'"),
    ({"networks": [{"name": "v", "model": "vit_b16"}]}, "need family"),
    ({"networks": [NETS[0], NETS[0]]}, "names must be unique"),
    ({"start_blocks": {"plain": 2}}, "start_blocks: no value for arm 'checkpoint'"),
    ({"arm_budget_s": {"vt": {"plain": 1}, **{a: 1 for a in ARMS}}}, r"arm_budget_s.vt: not a network"),
])
def test_bad_input_is_refused_naming_it(tmp_path, kw, needle):
    with pytest.raises(ValueError, match=needle):
        depth(_params(**kw), Context(out_dir=tmp_path))
    assert not list(tmp_path.glob("*.csv"))  # refused before any probe


def test_claims_rows_read_the_depth_models_record(tmp_path, run):
    """sn.depth_vit / sn.depth_gpt of the real ledger: the smoke record's estimate is shown, not
    judged, beside no reference; a paper-scale record is judged against the issue's 10x."""
    _, result = run
    results, reference = tmp_path / "results", tmp_path / "reference"
    records.write(results / "superneurons" / "depth_models", _record(scale="smoke", metrics=result.metrics))
    ledger = config_dir() / "claims"
    df = claims.build(ledger, results, reference).set_index("claim_id")
    for net in ("vit", "gpt"):
        row = df.loc[f"sn.depth_{net}"]
        assert (row.reference_verdict, row.here_verdict) == ("no-reference", "smoke")
        assert float(row.here_measured) == pytest.approx(result.metrics[f"est_depth_ratio_{net}"])
        assert row.target == ">= 10"
    paper = _record(scale="paper", metrics={"depth_ratio_vit": 12.0, "depth_ratio_gpt": 8.0})
    records.write(results / "superneurons" / "depth_models", {**paper, "provenance": {**PROVENANCE,
                                                                                      "gpu_name": "NVIDIA H200"}})
    df = claims.build(ledger, results, reference).set_index("claim_id")
    assert df.loc["sn.depth_vit", "here_verdict"] == "reproduced"
    assert df.loc["sn.depth_gpt", "here_verdict"] == "not-reproduced"


def test_a_smoke_estimate_is_shown_as_one(tmp_path):
    """here_side: a smoke record without the claim's key shows its est_<key> and says it is an estimate."""
    (tmp_path / "config" / "experiment" / "k").mkdir(parents=True)
    (tmp_path / "config" / "experiment" / "k" / "e.yaml").write_text("name: e\npaper: k\ngpus: 1\n")
    claim = dict(id="k.x", paper="K", statement="s", paper_value=1, unit="x", target=2, direction=">=",
                 metric={"experiment": "k/e", "key": "ratio"})
    records.write(tmp_path / "results" / "k" / "e", {**_record(scale="smoke", metrics={"est_ratio": 3.5}),
                                                    "experiment": "e", "paper": "k"})
    row = claims.evaluate(claim, tmp_path / "results", tmp_path / "ref", tmp_path / "config")
    assert (row["here_verdict"], row["here_measured"]) == ("smoke", "3.5")
    assert any("an estimate: est_ratio" in d for d in row["here_details"])
    assert Path(row["here_record"]).name == records.RECORD_NAME
