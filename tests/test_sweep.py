"""repro.sweep: what every sweep shares (points checked, the configured-run rule, overrides, reading a
point back), on the repository's two sweeps and on fabricated ones."""

from __future__ import annotations

import pytest

from repro import layout, records, sweep
from repro.experiment import Context


def test_points_are_checked(tmp_path, monkeypatch):
    exp = tmp_path / "experiment" / "p"
    exp.mkdir(parents=True)
    (exp / "arm.yaml").write_text("name: arm\npaper: p\ngpus: 1\nparams: {lr: 0.1}\n")
    (exp / "sw.yaml").write_text("name: sw\npaper: p\ngpus: 0\nsweep: fake_sweep:points\nparams: {names: [a, b]}\n")
    module = tmp_path / "fake_sweep.py"
    module.write_text("from repro.sweep import Point\n"
                      "def points(params):\n"
                      "    return [Point(n, params.get('experiment', 'p/arm'), {'lr': 0.1 * (i + 1)})"
                      " for i, n in enumerate(params['names'])]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = sweep.points("p/sw", "paper", tmp_path)
    assert [p.name for p in found] == ["a", "b"]
    # the first point equals the arm's configured run: the sweep reads that run's record
    assert sweep.needed_records("p/sw", "paper", root=tmp_path) == {"a": "results/p/arm/record.json",
                                                                     "b": "results/p/sw/b/record.json"}
    for params, needle in (("{names: [a, a]}", "repeated"), ("{names: [a/b]}", "not a folder name"),
                           ("{names: [a], experiment: p/nope}", "which is no experiment")):
        (exp / "sw.yaml").write_text(f"name: sw\npaper: p\ngpus: 0\nsweep: fake_sweep:points\nparams: {params}\n")
        layout._experiment_file.cache_clear()
        with pytest.raises(layout.LayoutError, match=needle):
            sweep.points("p/sw", "paper", tmp_path)


def test_overrides_set_the_winning_layer_and_the_seed():
    point = sweep.Point("x", "a/b", {"epochs": 4}, seed=2)
    assert sweep.hydra_overrides(point, "smoke") == " ++experiment.smoke.epochs=4 seed=2"
    assert sweep.hydra_overrides(sweep.Point("x", "a/b", {"eb": 0.5}), "paper") == " ++experiment.params.eb=0.5"


def _record(path, params, seed=0):
    records.write(path, dict(experiment="arm", paper="p", scale="smoke", status="ok", params=params, metrics={},
                             provenance={}, started="2026-01-01T00:00:00+00:00", seed=seed))
    return path / "record.json"


def test_read_point_checks_what_ran(tmp_path):
    point = sweep.Point("arm_e4", "p/arm", {"epochs": 4})
    ctx = Context(out_dir=tmp_path, inputs={"arm_e4": _record(tmp_path / "arm_e4", {"epochs": 4})})
    assert sweep.read_point(ctx, point)[1] == "sweep point"
    ctx.inputs["arm_e4"] = _record(tmp_path / "arm", {"epochs": 4})
    assert sweep.read_point(ctx, point)[1] == "configured run"
    ctx.inputs["arm_e4"] = _record(tmp_path / "stale", {"epochs": 3})
    with pytest.raises(records.RecordError, match="ran {'epochs': 3}, the sweep needs {'epochs': 4}"):
        sweep.read_point(ctx, point)
    repeat = sweep.Point("arm_e4_s1", "p/arm", {"epochs": 4}, seed=1)
    ctx.inputs["arm_e4_s1"] = _record(tmp_path / "arm_e4_s1", {"epochs": 4}, seed=0)
    with pytest.raises(records.RecordError, match="ran seed 0, the sweep needs seed 1"):
        sweep.read_point(ctx, repeat)
    ctx.inputs["nope"] = tmp_path / "nope" / "record.json"
    with pytest.raises(records.MissingRecord):
        sweep.read_point(ctx, sweep.Point("nope", "p/arm", {}))


def test_the_repository_sweeps_run_in_their_own_folders():
    for name in ("clicktrain/clicktrain_budget", "comet/comet_eb_sweep"):
        assert sweep.is_sweep(name)
        for point in sweep.own_points(name, "paper").values():
            assert sweep.needed_record(name, point, "paper") == f"results/{name}/{point.name}/record.json"
