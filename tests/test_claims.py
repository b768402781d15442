"""The claims ledger and the verdict logic."""

import json
import math
import re

import pytest
import yaml

from repro import records
from repro.report import claims
from repro.pipeline import reference

from conftest import REPO


def test_ledger_has_every_claim_id_of_papers_md():
    papers = REPO.parent / "shared" / "PAPERS.md"
    if not papers.exists():
        pytest.skip("../shared/PAPERS.md not beside the checkout")
    text = papers.read_text()
    ids = set(re.findall(r"^- `([a-z0-9_]+\.[a-z0-9_]+)`", text, flags=re.M))
    ids |= set(re.findall(r"claims?:?\s+`([a-z0-9_]+\.[a-z0-9_]+)`", text, flags=re.I))
    ids |= set(re.findall(r"^- `([a-z]+)`:", text, flags=re.M))  # simulator rows
    assert len(ids) >= 20, sorted(ids)
    ledger = {c["id"] for c in claims.load_ledger(REPO / "config" / "claims")}
    assert ids <= ledger, f"missing from config/claims/: {sorted(ids - ledger)}"


def _write(root, paper, name, metrics, scale="paper", status="ok", gpu="NVIDIA H200"):
    rec = dict(experiment=name, paper=paper, scale=scale, status=status, params={}, metrics=metrics,
               provenance={"gpu_name": gpu, "commit": "c0ffee", "dirty": False, "config_hash": "x", "hostname": "h"},
               started="2026-11-30T00:00:00+00:00", reason=None if status == "ok" else "skipped: needs a CUDA GPU")
    records.write(root / paper / name, rec)


@pytest.fixture
def setup(tmp_path):
    ledger = tmp_path / "claims.yaml"
    config = tmp_path / "config"
    for e, gpus in (("k/fast", 1), ("k/skipped", 1), ("k/sim", 0)):
        (config / "experiment" / e).parent.mkdir(parents=True, exist_ok=True)
        paper, name = e.split("/")
        (config / "experiment" / f"{e}.yaml").write_text(f"name: {name}\npaper: {paper}\ngpus: {gpus}\n")
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x")
    ledger.write_text(yaml.safe_dump({"claims": [
        {**common, "id": "a.pass", "target": 1.5, "direction": ">=",
         "metric": {"experiment": "k/fast", "key": "speedup"},
         "also": [{"experiment": "k/fast", "key": "min", "target": 1.0, "direction": ">="}]},
        {**common, "id": "a.fail", "target": 3.0, "direction": ">=", "metric": {"experiment": "k/fast", "key": "speedup"}},
        {**common, "id": "a.ref", "target": 1.0, "direction": ">=", "metric": {"experiment": "k/skipped", "key": "speedup"}},
        {**common, "id": "a.model", "target": 1.0, "direction": ">=", "kind": "model",
         "metric": {"experiment": "k/sim", "key": "speedup"}},
        {**common, "id": "a.pending", "target": 1.0, "direction": ">=", "needs": "gpu2"},
        {**common, "id": "a.noexp", "target": 1.0, "direction": ">=", "metric": {"experiment": "k/none", "key": "v"}},
    ]}))
    results, ref = tmp_path / "results", tmp_path / "reference"
    _write(results, "k", "fast", {"speedup": 2.0, "min": 1.2})
    _write(results, "k", "skipped", {}, scale="smoke", status="skipped", gpu=None)
    _write(ref / "nvidia-h200", "k", "skipped", {"speedup": 1.7})
    _write(results, "k", "sim", {"speedup": 1.2}, gpu=None)
    return ledger, results, ref, config


def test_verdicts(setup):
    df = claims.build(*setup).set_index("claim_id")
    assert df.loc["a.pass", "verdict"] == "reproduced" and df.loc["a.pass", "measured"] == "2"
    assert df.loc["a.pass", "source"] == "this-run" and df.loc["a.pass", "hardware"] == "NVIDIA H200"
    assert df.loc["a.fail", "verdict"] == "not-reproduced"
    assert df.loc["a.ref", "verdict"] == "not-run-here"
    assert df.loc["a.ref", "source"] == "reference" and df.loc["a.ref", "measured"] == "1.7"
    assert "needs a CUDA GPU" in df.loc["a.ref", "here_why"]
    assert df.loc["a.model", "verdict"] == "model"
    assert df.loc["a.pending", "verdict"] == "pending"
    assert df.loc["a.noexp", "verdict"] == "pending"
    assert df.loc["a.pass", "needs"] == "gpu" and df.loc["a.model", "needs"] == "cpu"  # from the experiments' gpus
    assert df.loc["a.pending", "needs"] == "gpu2"  # stated by a claim with no metric yet


def test_the_ledger_is_every_paper_file_and_ids_are_unique_across_them(tmp_path):
    one = dict(paper="P", statement="s", paper_value=1, unit="u", target=1, direction=">=")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"claims": [{**one, "id": "x.1"}]}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"claims": [{**one, "id": "y.1"}]}))
    assert [c["id"] for c in claims.load_ledger(tmp_path)] == ["x.1", "y.1"]
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"claims": [{**one, "id": "x.1"}]}))
    with pytest.raises(claims.LedgerError, match="b.yaml: claim #1 .x.1.: duplicate id .also in .*a.yaml"):
        claims.load_ledger(tmp_path)


def test_needs_is_derived_and_may_not_be_stated_beside_a_metric(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(yaml.safe_dump({"claims": [dict(id="x", paper="P", statement="s", paper_value=1, unit="u",
                                                    target=1, direction=">=", needs="gpu",
                                                    metric={"experiment": "a/b", "key": "k"})]}))
    with pytest.raises(claims.LedgerError, match="needs follows from the experiments' gpus"):
        claims.load_ledger(bad)


def test_a_comparison_needs_the_gpus_of_what_it_reads():
    """clicktrain_compare is a CPU step over GPU records: its claims need a GPU; the sweep of the
    COMET arms (a CPU step over its points) too."""
    assert claims.gpus_needed("clicktrain/clicktrain_compare") == 1
    assert claims.gpus_needed("comet/comet_eb_sweep") == 1
    assert claims.gpus_needed("comet/comet_sz3") == 1


def test_failing_also_condition_fails_the_claim(setup):
    ledger, results, ref, exps = setup
    _write(results, "k", "fast", {"speedup": 2.0, "min": 0.9})
    df = claims.build(ledger, results, ref, exps).set_index("claim_id")
    assert df.loc["a.pass", "verdict"] == "not-reproduced"


def test_report_files_keep_the_earlier_columns_first(setup, tmp_path):
    from repro.report import pages as report

    ledger, results, ref, config = setup
    df = claims.build(*setup)
    report.write(df, tmp_path / "out", [], results=results, reference_root=ref)
    header = (tmp_path / "out" / "claims.csv").read_text().splitlines()[0].split(",")
    assert header[:len(claims.COLUMNS)] == claims.COLUMNS and header == claims.CSV_COLUMNS
    html = (tmp_path / "out" / "report.html").read_text()
    assert all(cid in html for cid in df.claim_id)


def test_ledger_errors_name_the_problem(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(yaml.safe_dump({"claims": [{"id": "x", "paper": "P", "statement": "s", "paper_value": 1,
                                               "unit": "u", "target": 1, "direction": "=>"}]}))
    with pytest.raises(claims.LedgerError, match="direction"):
        claims.load_ledger(bad)
    bad.write_text(yaml.safe_dump({"claims": [{"id": "x", "colour": 1}]}))
    with pytest.raises(claims.LedgerError, match="colour"):
        claims.load_ledger(bad)


def test_reference_run_without_a_metric_has_no_reference_value(setup):
    ledger, results, ref, exps = setup
    _write(ref / "nvidia-h200", "k", "skipped", {"other": 1.0})  # made by code that did not compute "speedup"
    df = claims.build(ledger, results, ref, exps).set_index("claim_id")
    assert df.loc["a.ref", "reference_verdict"] == "no-reference"
    assert any("has no metric 'speedup'" in d for d in df.loc["a.ref", "reference_details"])


def test_missing_metric_in_record_is_an_error(setup):
    ledger, results, ref, exps = setup
    _write(results, "k", "fast", {"speedup": 2.0})  # no "min"
    with pytest.raises(claims.LedgerError, match="no metric 'min'"):
        claims.build(ledger, results, ref, exps)


def test_stale_code_names_what_changed_since_a_reference_run(monkeypatch):
    from repro.pipeline import provenance

    rec = {"paper": "comet", "experiment": "comet_fixed_eb", "provenance": {"commit": "abcdef1234"}}
    seen = {}

    def fake(commit, paths):
        seen.update(commit=commit, paths=paths)
        return ["src/repro/papers/comet/hooks.py", "config/experiment/comet/comet_uncompressed.yaml"]

    monkeypatch.setattr(provenance, "changed_since", fake)
    note = reference.stale_code(rec)
    assert "abcdef1" in note and "hooks.py" in note and "comet_uncompressed.yaml" in note
    # what its entry module (repro.papers.comet.arms) imports, shared code too, and its experiment file and its base
    assert seen["commit"] == "abcdef1234"
    assert {"src/repro/papers/comet/hooks.py", "src/repro/train/trainer.py", "src/repro/papers/comet/kernels/comet_codec.cu",
            "config/experiment/comet/comet_fixed_eb.yaml", "config/experiment/comet/comet_uncompressed.yaml"} <= set(seen["paths"])
    assert not any(p.endswith(("figures.py", "/run.py", "clicktrain/experiment.py")) for p in seen["paths"])
    for unchanged in ([], None):  # nothing changed, or git cannot tell: no note
        monkeypatch.setattr(provenance, "changed_since", lambda c, p, r=unchanged: r)
        assert reference.stale_code(rec) == ""


def test_a_record_listing_its_code_is_checked_file_by_file(monkeypatch, tmp_path):
    """Since records list their code by digest, the note names exactly the files that compute
    something else now: not a comment, docstring or formatting edit, and not a file it never ran."""
    from repro.pipeline import provenance

    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    src = tmp_path / "src" / "step.py"
    src.parent.mkdir()
    src.write_text('"""Doc."""\n\ndef step(x):\n    return x * 2  # double\n')
    kernel = tmp_path / "src" / "k.cu"
    kernel.write_text("// kernel\n__global__ void k() {}\n")
    rec = {"paper": "p", "experiment": "e", "provenance": {"commit": "abcdef1234",
                                                           "code": provenance.code_digests([src, kernel])}}
    monkeypatch.setattr(provenance, "changed_since", lambda *a: pytest.fail("git is not asked"))
    src.write_text('"""Other doc."""\n\n\ndef step(x):\n    # twice\n    return x*2\n')
    kernel.write_text("// kernel, v2\n\n__global__ void k() {}\n")
    assert reference.stale_code(rec) == ""
    src.write_text('"""Doc."""\n\ndef step(x):\n    return x * 3\n')
    assert reference.stale_code(rec) == "its code changed since that run (abcdef1: src/step.py): a rerun may change it"
    src.unlink()
    assert "step.py" in reference.stale_code(rec)  # gone counts as changed


def test_a_run_records_the_code_it_ran():
    """code_files keeps what computes the numbers: the arms, trainer and data modules and the paper's
    kernels, not the runner's bookkeeping or the figure modules."""
    import sys

    import repro.papers.comet.arms  # noqa: F401
    import repro.figures  # noqa: F401
    import repro.pipeline.run  # noqa: F401
    from repro.pipeline import provenance

    files = {p.relative_to(provenance.REPO_ROOT).as_posix() for p in provenance.code_files(list(sys.modules))}
    assert {"src/repro/papers/comet/arms.py", "src/repro/papers/comet/kernels/comet_codec.cu",
            "src/repro/train/trainer.py"} <= files
    assert not {"src/repro/pipeline/run.py", "src/repro/records.py", "src/repro/figures.py",
                "src/repro/papers/comet/figures.py"} & files


def test_import_closure_reads_what_an_entry_module_imports():
    """Read from the sources, the closure of the ClickTrain arms is what a run of them loads: its own
    modules, the trainer, data and models, the baseline it reuses; not the sweep's collection step."""
    from repro.pipeline import provenance

    closure = provenance.import_closure("repro.papers.clicktrain.experiment")
    assert {"repro", "repro.papers.clicktrain", "repro.papers.clicktrain.masks", "repro.train.trainer", "repro.data.arrays",
            "repro.models.resnet"} <= set(closure)
    assert "repro.papers.clicktrain.budget" not in closure and "repro.papers.clicktrain.sweep" not in closure
    files = {provenance.repo_path(f) for f in provenance.code_files(closure)}
    assert "src/repro/papers/clicktrain/experiment.py" in files and "src/repro/__init__.py" not in files


def test_changed_since_is_none_for_a_commit_this_clone_lacks():
    from repro.pipeline.provenance import changed_since

    assert changed_since("0" * 40, ["src"]) is None
    assert changed_since("unknown", ["src"]) is None


def test_stale_code_of_a_comparison_names_its_stale_inputs(monkeypatch, tmp_path):
    """A CPU step made today over a GPU record whose code changed since: the note names that input."""
    from repro import records
    from repro.pipeline import provenance

    arm = tmp_path / "comet" / "comet_actnn2bit"
    arm.mkdir(parents=True)
    (arm / records.RECORD_NAME).write_text(json.dumps(
        {"paper": "comet", "experiment": "comet_actnn2bit", "provenance": {"commit": "old1234567"}, "scale": "paper",
         "status": "ok", "params": {}, "metrics": {}, "started": "2026-12-01T00:00:00"}))
    cmp = {"paper": "comet", "experiment": "comet_compare", "provenance": {"commit": "new7654321"},
           "inputs": {"actnn2bit": "results/comet/comet_actnn2bit/record.json", "kernels": "results/build/kernels"}}
    monkeypatch.setattr(provenance, "changed_since",
                        lambda commit, paths: ["src/repro/papers/comet/hooks.py"] if commit == "old1234567" else [])
    note = reference.stale_code(cmp, tmp_path)
    assert note.startswith("the code of its inputs changed") and "comet_actnn2bit (old1234: comet/hooks.py)" in note
    assert "its code" not in note  # the comparison itself is current
    assert reference.stale_code(cmp) == ""  # without the results folder nothing is resolved


def test_timing_claims_name_records_measured_on_a_shared_gpu(tmp_path):
    """A comparison whose input ran beside other GPU processes: a timing claim's note says which."""
    from repro import records
    from repro.report import claims

    def write(rel, experiment, sharing, inputs=None):
        d = tmp_path / rel
        d.mkdir(parents=True)
        rec = {"paper": "p", "experiment": experiment, "scale": "paper", "status": "ok", "params": {}, "metrics": {},
               "started": "2026-12-01T00:00:00", "provenance": {"gpu_sharing": sharing}, "inputs": inputs or {}}
        (d / records.RECORD_NAME).write_text(json.dumps(rec))
        return records.read(d / records.RECORD_NAME)

    write("p/alone", "alone", {"gpu_neighbours_max": 0})
    write("p/shared", "shared", {"gpu_neighbours_max": 3})
    cmp = write("p/cmp", "cmp", None, {"a": "results/p/alone/record.json", "b": "results/p/shared/record.json"})
    note = claims.shared_gpu([cmp])
    assert "shared (up to 3)" in note and "alone" not in note and "shared-GPU times" in note
    assert claims.shared_gpu([records.read(tmp_path / "p" / "alone" / records.RECORD_NAME)]) == ""
    assert claims.shared_gpu([cmp], ["a"]) == ""  # the value uses only input a's times
    assert "shared (up to 3)" in claims.shared_gpu([cmp], ["a", "b"])


@pytest.mark.parametrize("timing", ["yes", [], [1], {"a": 1}])
def test_ledger_refuses_a_bad_timing_field(tmp_path, timing):
    from repro.report import claims

    claim = dict(id="x.y", paper="p", statement="s", paper_value=1, unit="x", target=1, direction=">=",
                 needs="gpu", timing=timing)
    (tmp_path / "l.yaml").write_text(yaml.safe_dump({"claims": [claim]}))
    with pytest.raises(claims.LedgerError, match="timing must be"):
        claims.load_ledger(tmp_path / "l.yaml")


def test_references_of_two_cards_are_judged_apart(tmp_path):
    """A ratio never mixes two cards' records: each card's runs judge the claim on their own, the first
    card that can judge it gives the row's verdict and the others are named beside it, a card whose run
    lacks the metric gives way to one that has it, and a claim whose experiments no one card has all of
    has no reference value, saying which card has which."""
    config = tmp_path / "config"
    for e in ("k/a", "k/b"):
        (config / "experiment" / "k").mkdir(parents=True, exist_ok=True)
        (config / "experiment" / f"{e}.yaml").write_text(f"name: {e[2:]}\npaper: k\ngpus: 1\n")
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", target=1.5, direction=">=")
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": [
        {**common, "id": "both", "metric": {"experiment": "k/a", "key": "speedup"}},
        {**common, "id": "lacks", "metric": {"experiment": "k/a", "key": "ratio"}},
        {**common, "id": "mixed", "metric": {"experiment": "k/a", "key": "speedup"},
         "also": [{"experiment": "k/b", "key": "speedup", "target": 1.0, "direction": ">="}]},
    ]}))
    ref = tmp_path / "reference"
    _write(ref / "nvidia-h200", "k", "a", {"speedup": 1.7})
    _write(ref / "nvidia-h100-80gb-hbm3", "k", "a", {"speedup": 1.2, "ratio": 2.5}, gpu="NVIDIA H100 80GB HBM3")
    _write(ref / "nvidia-h100-80gb-hbm3", "k", "b", {"speedup": 1.1}, gpu="NVIDIA H100 80GB HBM3")
    df = claims.build(ledger, tmp_path / "results", ref, config).set_index("claim_id")
    both = df.loc["both"]
    assert (both.reference_verdict, both.reference_measured, both.reference_hardware) == ("reproduced", "1.7", "NVIDIA H200")
    assert any(d.startswith("on NVIDIA H100 80GB HBM3: 1.2 (not reproduced") for d in both.reference_details)
    assert both.reference_cards == {"nvidia-h100-80gb-hbm3": {"verdict": "not-reproduced", "value": 1.2,
                                                              "hardware": "NVIDIA H100 80GB HBM3", "ceiling": None,
                                                              "miss": "no-ceiling"}}
    lacks = df.loc["lacks"]  # the H200's run has no "ratio": the H100's judges it, the H200's is named
    assert (lacks.reference_verdict, lacks.reference_hardware) == ("reproduced", "NVIDIA H100 80GB HBM3")
    assert any(d.startswith("on NVIDIA H200: no value") and "has no metric 'ratio'" in d for d in lacks.reference_details)
    mixed = df.loc["mixed"]  # only the H100 has k/b: judged there alone, never H200's k/a beside H100's k/b
    assert (mixed.reference_verdict, mixed.reference_hardware) == ("not-reproduced", "NVIDIA H100 80GB HBM3")
    assert mixed.reference_measured == "1.2"
    (ref / "nvidia-h100-80gb-hbm3" / "k" / "a" / "record.json").unlink()
    mixed = claims.build(ledger, tmp_path / "results", ref, config).set_index("claim_id").loc["mixed"]
    assert mixed.reference_verdict == "no-reference"
    assert "no one card has them all (nvidia-h200: k/a; nvidia-h100-80gb-hbm3: k/b)" in mixed.reference_details[0]


def test_a_margin_inside_the_run_to_run_spread_is_inconclusive(tmp_path):
    """The ledger names the repeat runs of a claim's headline metric; a margin to the target inside
    their range (the run and its repeats) is no verdict, a margin outside it keeps its verdict with the
    spread shown, and a claim without repeats says that no spread was measured."""
    config = tmp_path / "config"
    (config / "experiment" / "k").mkdir(parents=True)
    (config / "experiment" / "k" / "a.yaml").write_text("name: a\npaper: k\ngpus: 1\n")
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", direction=">=",
                  metric={"experiment": "k/a", "key": "speedup"})
    repeats = {"repeats": ["logs/k/a_seeds/s1", "logs/k/a_seeds/s2"]}
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": [
        {**common, "id": "near", "target": 1.65, "spread": repeats},   # margin 0.05 < range 0.1
        {**common, "id": "far", "target": 1.2, "spread": repeats},     # margin 0.5 > range 0.1
        {**common, "id": "none", "target": 1.2},
        {**common, "id": "gone", "target": 1.2, "spread": {"repeats": ["logs/k/a_seeds/s9"]}},
    ]}))
    card = tmp_path / "reference" / "nvidia-h200"
    _write(card, "k", "a", {"speedup": 1.7})
    _write(card / "logs" / "k", "a_seeds", "s1", {"speedup": 1.6})
    _write(card / "logs" / "k", "a_seeds", "s2", {"speedup": 1.65})
    df = claims.build(ledger, tmp_path / "results", tmp_path / "reference", config).set_index("claim_id")
    near = df.loc["near"]
    assert near.reference_verdict == "inconclusive" and near.reference_measured == "1.7"
    assert near.reference_details[0].startswith("inconclusive: the margin to the target is inside the 0.1 (range over 3 runs")
    far = df.loc["far"]
    assert far.reference_verdict == "reproduced"
    assert any(d.startswith("run-to-run spread: 0.1 (range over 3 runs, 1.6 to 1.7); margin to the target 0.5")
               for d in far.reference_details)
    assert "run-to-run spread: none measured (the ledger names no repeat runs)" in df.loc["none"].reference_details
    gone = df.loc["gone"]
    assert gone.reference_verdict == "reproduced"
    assert any("repeat runs missing on this card (logs/k/a_seeds/s9)" in d for d in gone.reference_details)
    assert claims.tally(df.reset_index(), "reference")["inconclusive"] == 1


def test_a_spread_from_the_runs_own_rounds_judges_a_ratio_of_arms(tmp_path):
    """spread: {rounds: <metric>}: each arm varied by up to that share over the run's rounds, so a ratio
    of two arms spans value / (1 + r) to value * (1 + r); a run of one round has no such metric."""
    config = tmp_path / "config"
    (config / "experiment" / "k").mkdir(parents=True)
    (config / "experiment" / "k" / "a.yaml").write_text("name: a\npaper: k\ngpus: 1\n")
    common = dict(paper="P", statement="s", paper_value=1.2, unit="x", direction=">=",
                  metric={"experiment": "k/a", "key": "speed"}, spread={"rounds": "round_spread_max"})
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": [
        {**common, "id": "near", "target": 1.2},   # 1.25 spans 1.19-1.31 at 5%: margin 0.05 inside 0.122
        {**common, "id": "far", "target": 1.0},    # margin 0.25 outside
        {**common, "id": "one", "target": 1.0, "metric": {"experiment": "k/a", "key": "other"}},
    ]}))
    card = tmp_path / "reference" / "nvidia-h200"
    _write(card, "k", "a", {"speed": 1.25, "round_spread_max": 0.05, "other": 1.5})
    df = claims.build(ledger, tmp_path / "results", tmp_path / "reference", config).set_index("claim_id")
    assert df.loc["near"].reference_verdict == "inconclusive"
    assert df.loc["near"].reference_details[0].startswith("inconclusive: the margin to the target is inside the 0.122024 (the run's rounds")
    assert df.loc["far"].reference_verdict == "reproduced"
    assert any(d.startswith("run-to-run spread: 0.122024 (the run's rounds: each arm within 5%, so 1.19048 to 1.3125)")
               for d in df.loc["far"].reference_details)
    assert df.loc["one"].reference_verdict == "reproduced"  # 1.5 +- 7%: well clear
    (card / "k" / "a" / "record.json").unlink()
    _write(card, "k", "a", {"speed": 1.25, "other": 1.5})  # a run of one round
    df = claims.build(ledger, tmp_path / "results", tmp_path / "reference", config).set_index("claim_id")
    assert df.loc["near"].reference_verdict == "reproduced"
    assert "run-to-run spread: none measured (its run records no 'round_spread_max': one round, or made before its experiment timed rounds)" in df.loc["near"].reference_details
    assert claims.rounds_range(2.0, 0.1) == pytest.approx((2.0 / 1.1, 2.2))


def test_a_malformed_spread_is_named(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump({"claims": [dict(id="x.y", paper="P", statement="s", paper_value=1, unit="x",
                                                   target=1, direction=">=", spread=["logs/a"])]}))
    with pytest.raises(claims.LedgerError, match=r"x.y.*spread must be \{repeats: \["):
        claims.load_ledger(bad)
    for spread in ({"rounds": ""}, {"rounds": "m", "repeats": ["a"]}, {"repeats": []}):
        bad.write_text(yaml.safe_dump({"claims": [dict(id="x.y", paper="P", statement="s", paper_value=1, unit="x",
                                                       target=1, direction=">=", spread=spread)]}))
        with pytest.raises(claims.LedgerError, match=r"or \{rounds: <metric>\}"):
            claims.load_ledger(bad)


def _ceiling_ledger(tmp_path, claims_list):
    config = tmp_path / "config"
    (config / "experiment" / "k").mkdir(parents=True, exist_ok=True)
    for name in ("a", "roof"):
        (config / "experiment" / "k" / f"{name}.yaml").write_text(f"name: {name}\npaper: k\ngpus: 1\n")
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": claims_list}))
    return ledger, config


ROOF = {"experiment": "k/roof", "key": "bound", "note": "a kernel at the copy ceiling"}


def test_each_miss_says_whether_the_implementation_or_the_claim_falls_short(tmp_path):
    """A miss with a ceiling that meets the target is the implementation's (with the fraction of the
    ceiling it reaches, in the claim's direction); one whose ceiling misses the target is the claim's
    on this card (with the ceiling's value); one without a ceiling value says why: the ledger names
    none, the run lacks the key, or the headline holds and the miss is in an also-condition. A claim
    that holds shows its ceiling and no miss; an inconclusive one keeps its verdict."""
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", direction=">=",
                  metric={"experiment": "k/a", "key": "speedup"})
    ledger, config = _ceiling_ledger(tmp_path, [
        {**common, "id": "impl", "target": 1.6, "ceiling": ROOF},                    # 1.2 of 2.4: 0.5
        {**common, "id": "claim", "target": 3.0, "ceiling": ROOF},                   # ceiling 2.4 < 3
        {**common, "id": "none", "target": 1.6, "ceiling": {"none": "no ideal kernel exists"}},
        {**common, "id": "unnamed", "target": 1.6},
        {**common, "id": "lacks", "target": 1.6, "ceiling": {**ROOF, "key": "other"}},
        {**common, "id": "also", "target": 1.0, "ceiling": ROOF,
         "also": [{"experiment": "k/a", "key": "min", "target": 1.0, "direction": ">="}]},
        {**common, "id": "holds", "target": 1.0, "ceiling": ROOF},
        {**common, "id": "time", "target": 1.0, "direction": "<=", "unit": "s", "ceiling": {**ROOF, "key": "floor"},
         "metric": {"experiment": "k/a", "key": "seconds"}},                          # 2 s over a 0.5 s floor: 0.25
        {**common, "id": "points", "target": 90.0, "unit": "% top-1", "ceiling": {**ROOF, "key": "top1_bound"},
         "metric": {"experiment": "k/a", "key": "top1"}},
        {**common, "id": "near", "target": 1.25, "ceiling": ROOF, "spread": {"repeats": ["logs/k/a_s1"]}},
    ])
    card = tmp_path / "reference" / "nvidia-h200"
    _write(card, "k", "a", {"speedup": 1.2, "min": 0.9, "seconds": 2.0, "top1": 88.0})
    _write(card / "logs" / "k", "a_s1", "", {"speedup": 1.3})
    _write(card, "k", "roof", {"bound": 2.4, "floor": 0.5, "top1_bound": 91.0})
    df = claims.build(ledger, tmp_path / "results", tmp_path / "reference", config).set_index("claim_id")
    impl = df.loc["impl"]
    assert (impl.reference_verdict, impl.reference_measured, impl.reference_ceiling, impl.reference_miss) == (
        "not-reproduced", "1.2", "2.4", "implementation")
    assert impl.reference_miss_text == "0.5 of its ceiling" and impl.reference_ceiling_value == 2.4
    assert any(d.startswith("miss: implementation short of its ceiling: the ceiling 2.4 meets the target (>= 1.6); "
                            "the measured value is 0.5 of its ceiling") for d in impl.reference_details)
    assert any(d.startswith("ceiling: 2.4 (bound of k/roof, ") and "a kernel at the copy ceiling" in d
               for d in impl.reference_details)
    claim = df.loc["claim"]
    assert (claim.reference_miss, claim.reference_miss_text) == ("ceiling-below-target", "ceiling 2.4")
    assert any("the ceiling 2.4 itself misses the target (>= 3): the claim does not hold on this card" in d
               for d in claim.reference_details)
    assert df.loc["none", "reference_miss"] == "no-ceiling"
    assert any(d == "miss: no ceiling measured: no ideal kernel exists"
               for d in df.loc["none", "reference_details"])
    assert "miss: no ceiling measured: the ledger names no ceiling" in df.loc["unnamed", "reference_details"]
    lacks = df.loc["lacks"]
    assert (lacks.reference_miss, lacks.reference_ceiling) == ("no-ceiling", "")
    assert any("the run of k/roof (c0ffee) has no metric 'other'" in d for d in lacks.reference_details)
    also = df.loc["also"]  # 1.2 holds >= 1.0; min 0.9 misses: no ceiling bounds an also-condition
    assert (also.reference_verdict, also.reference_miss, also.reference_miss_text) == (
        "not-reproduced", "no-ceiling", "the miss is in min")
    holds = df.loc["holds"]
    assert (holds.reference_verdict, holds.reference_ceiling, holds.reference_miss) == ("reproduced", "2.4", "")
    time = df.loc["time"]  # smaller is better: the fraction is ceiling / measured
    assert (time.reference_miss, time.reference_miss_text) == ("implementation", "0.25 of its ceiling")
    points = df.loc["points"]  # a difference claim: the gap in its unit, not a fraction
    assert (points.reference_miss, points.reference_miss_text) == ("implementation", "3 % top-1 short of its ceiling")
    near = df.loc["near"]
    assert (near.reference_verdict, near.reference_ceiling, near.reference_miss) == ("inconclusive", "2.4", "")
    counts = claims.miss_tally(df.reset_index(), "reference")
    assert {k: counts[k] for k in claims.MISS_KINDS} == {"implementation": 3, "ceiling-below-target": 1, "no-ceiling": 4}


def test_a_ceiling_never_comes_from_another_card(tmp_path):
    """Each card's claim is bounded by that card's own run of the ceiling experiment: a card without
    one has no ceiling (never the other card's), and a record of another GPU filed under a card is
    refused."""
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", direction=">=", target=1.6,
                  metric={"experiment": "k/a", "key": "speedup"}, ceiling=ROOF)
    ledger, config = _ceiling_ledger(tmp_path, [{**common, "id": "c"}])
    ref = tmp_path / "reference"
    h100 = dict(gpu="NVIDIA H100 80GB HBM3")
    _write(ref / "nvidia-h200", "k", "a", {"speedup": 1.2})
    _write(ref / "nvidia-h200", "k", "roof", {"bound": 2.4})
    _write(ref / "nvidia-h100-80gb-hbm3", "k", "a", {"speedup": 1.1}, **h100)
    claim = claims.load_ledger(ledger)[0]
    sides = claims.card_sides(claim, ref, tmp_path / "results", config)
    assert (sides["nvidia-h200"].ceiling, sides["nvidia-h200"].miss) == (2.4, "implementation")
    h100_side = sides["nvidia-h100-80gb-hbm3"]
    assert (h100_side.ceiling, h100_side.miss) == (None, "no-ceiling")
    assert "miss: no ceiling measured: no committed run of k/roof on this card" in h100_side.details
    _write(ref / "nvidia-h100-80gb-hbm3", "k", "roof", {"bound": 1.3}, **h100)
    h100_side = claims.card_sides(claim, ref, tmp_path / "results", config)["nvidia-h100-80gb-hbm3"]
    assert (h100_side.ceiling, h100_side.miss) == (1.3, "ceiling-below-target")
    row = claims.build(ledger, tmp_path / "results", ref, config).set_index("claim_id").loc["c"]
    assert (row.reference_ceiling, row.reference_miss) == ("2.4", "implementation")  # the H200's own
    assert row.reference_cards["nvidia-h100-80gb-hbm3"]["ceiling"] == 1.3
    assert any(d.startswith("on NVIDIA H100 80GB HBM3: 1.1 (not reproduced; ceiling 1.3; miss: ceiling below the "
                            "target; ") for d in row.reference_details)
    _write(ref / "nvidia-h200", "k", "roof", {"bound": 9.9}, **h100)  # an H100's record misfiled as the H200's
    h200 = claims.card_sides(claim, ref, tmp_path / "results", config)["nvidia-h200"]
    assert (h200.ceiling, h200.miss) == (None, "no-ceiling")
    assert any("measured NVIDIA H100 80GB HBM3, not NVIDIA H200: a ceiling never comes from another card" in d
               for d in h200.details)


def test_here_a_ceiling_comes_from_this_machines_run_at_the_claims_scale(tmp_path):
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", direction=">=", target=1.6,
                  metric={"experiment": "k/a", "key": "speedup"}, ceiling=ROOF)
    ledger, config = _ceiling_ledger(tmp_path, [{**common, "id": "c"}])
    results = tmp_path / "results"
    _write(results, "k", "a", {"speedup": 1.2})
    _write(results, "k", "roof", {"bound": 2.4}, scale="smoke")
    row = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id").loc["c"]
    assert (row.here_verdict, row.here_ceiling, row.here_miss) == ("not-reproduced", "", "no-ceiling")
    assert any("k/roof ran here at smoke scale, the claim at paper" in d for d in row.here_details)
    _write(results, "k", "roof", {"bound": 1.5})
    row = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id").loc["c"]
    assert (row.here_ceiling, row.here_miss, row.here_miss_text) == ("1.5", "ceiling-below-target", "ceiling 1.5")


@pytest.mark.parametrize("ceiling", [
    {"experiment": "k/roof", "key": "bound"},                            # no note
    {"experiment": "roof", "key": "bound", "note": "n"},                 # not <paper>/<name>
    {"none": ""},                                                        # no reason
    {"none": "why", "key": "bound"},                                     # both forms
    "k/roof bound",
    {"experiment": "k/roof", "key": "bound", "note": "n", "colour": 1},
])
def test_a_malformed_ceiling_is_named(tmp_path, ceiling):
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump({"claims": [dict(id="x.y", paper="P", statement="s", paper_value=1, unit="x",
                                                   target=1, direction=">=", needs="gpu", ceiling=ceiling)]}))
    with pytest.raises(claims.LedgerError, match=r"claim #1 \(x.y\): ceiling must be \{experiment: <paper>/<name>"):
        claims.load_ledger(bad)


def test_every_measured_claim_names_its_ceiling_or_why_there_is_none():
    """The ledger's every claim with a metric has a ceiling: a record's metric (experiment and key) or
    the reason none can be measured."""
    for claim in claims.load_ledger(REPO / "config" / "claims"):
        if claim.get("metric"):
            assert "ceiling" in claim, f"{claim['id']}: no ceiling (name one, or say none: <why>)"


# --- table statistics: a claim's value computed from a run's own table (issue 41) ---------------------

POINTS = "kind,dtype,speedup,gbps_ours,gbps_cublas,frac\n" + "\n".join([
    "r,float32,1.0,110,100,0.5",
    "r,float32,4.0,300,200,0.25",
    "r,float64,2.0,90,100,1.0",
    "l,float32,9.0,100,100,0.1",
]) + "\n"


def _table_run(root, points=POINTS, metrics=None):
    _write(root, "k", "a", metrics or {"speedup": 1.0})
    (root / "k" / "a" / "points.csv").write_text(points)
    return records.read(root / "k" / "a")


@pytest.mark.parametrize("stat,where,expected", [
    ("mean", {"kind": "r", "dtype": "float32"}, 2.5),
    ("geomean", {"kind": "r", "dtype": "float32"}, 2.0),
    ("min", {"kind": "r"}, 1.0),
    ("max", None, 9.0),
    ("median", {"kind": "r"}, 2.0),
    ("mean", {"dtype": "float64"}, 2.0),
])
def test_a_table_statistic_is_computed_from_the_runs_own_rows(tmp_path, stat, where, expected):
    rec = _table_run(tmp_path)
    cond = {"experiment": "k/a", "table": "points.csv", "column": "speedup", "stat": stat} | (
        {"where": where} if where else {})
    value, why = claims.source_value(rec, cond)
    assert why == "" and value == pytest.approx(expected)


def test_a_table_ratio_and_minus(tmp_path):
    rec = _table_run(tmp_path)
    gain = {"experiment": "k/a", "table": "points.csv", "ratio": ["gbps_ours", "gbps_cublas"], "minus": 1,
            "stat": "mean", "where": {"kind": "r"}}
    assert claims.source_value(rec, gain) == (pytest.approx((0.1 + 0.5 - 0.1) / 3), "")
    inverse = {"experiment": "k/a", "table": "points.csv", "ratio": [1, "frac"], "stat": "max"}
    assert claims.source_value(rec, inverse) == (pytest.approx(10.0), "")
    assert claims.label(gain) == "mean of points.csv:gbps_ours/gbps_cublas - 1 (kind=r)"
    # a geomean over a value <= 0 has no value
    assert math.isnan(claims.source_value(rec, {**gain, "stat": "geomean"})[0])


def test_a_missing_table_column_or_row_says_so(tmp_path):
    rec = _table_run(tmp_path)
    base = {"experiment": "k/a", "table": "points.csv", "column": "speedup", "stat": "mean"}
    assert claims.source_value(rec, {**base, "table": "other.csv"}) == (None, "has no table other.csv")
    assert claims.source_value(rec, {**base, "column": "nope"}) == (None, "has no column 'nope' in points.csv")
    assert claims.source_value(rec, {**base, "where": {"colour": "red"}})[1] == "has no column 'colour' in points.csv"
    assert claims.source_value(rec, {**base, "where": {"kind": "z"}}) == (None, "has no rows in points.csv where kind=z")
    nan = _table_run(tmp_path / "n", points="speedup,kind\n1.0,r\n,r\n")
    assert math.isnan(claims.source_value(nan, base)[0])


def _stat_ledger(tmp_path, **fields):
    claim = dict(id="t.mean", paper="P", statement="s", paper_value=2.0, unit="x", target=2.0, direction=">=",
                 metric={"experiment": "k/a", "table": "points.csv", "column": "speedup", "stat": "mean",
                         "where": {"kind": "r"}},
                 ceiling={"experiment": "k/a", "table": "points.csv", "ratio": [1, "frac"], "stat": "mean",
                          "where": {"kind": "r"}, "note": "a kernel at the copy rate on every point"}) | fields
    return _ceiling_ledger(tmp_path, [claim])


def test_a_claim_on_a_table_statistic_is_judged_on_both_sides(tmp_path):
    """The headline, an also-condition and the ceiling read as table statistics: the reference side
    from the committed run's table, the here side from this machine's; the details show the statistic."""
    ledger, config = _stat_ledger(tmp_path, also=[{"experiment": "k/a", "table": "points.csv", "column": "speedup",
                                                   "stat": "min", "target": 1.0, "direction": ">="}])
    results, ref = tmp_path / "results", tmp_path / "reference"
    _table_run(ref / "nvidia-h200")
    _table_run(results, points=POINTS.replace("r,float32,4.0", "r,float32,2.5"))
    row = claims.build(ledger, results, ref, config).set_index("claim_id").loc["t.mean"]
    assert (row.reference_verdict, row.reference_measured) == ("reproduced", "2.33333")
    assert "headline mean of points.csv:speedup (kind=r) = 2.333 (>= 2: holds)" in row.reference_details
    assert "also min of points.csv:speedup = 1 (>= 1: holds)" in row.reference_details
    assert row.reference_ceiling == "2.33333"  # mean of 1/frac over the kind=r rows: (2 + 4 + 1) / 3
    assert any(d.startswith("ceiling: 2.333 (mean of points.csv:1/frac (kind=r) of k/a") for d in row.reference_details)
    assert (row.here_verdict, row.here_measured) == ("not-reproduced", "1.83333")
    assert (row.here_miss, row.here_miss_text) == ("implementation", "0.786 of its ceiling")


def test_a_reference_run_without_the_table_has_no_reference_value(tmp_path):
    ledger, config = _stat_ledger(tmp_path)
    ref = tmp_path / "reference"
    _write(ref / "nvidia-h200", "k", "a", {"speedup": 1.0})  # no points.csv
    row = claims.build(ledger, tmp_path / "results", ref, config).set_index("claim_id").loc["t.mean"]
    assert row.reference_verdict == "no-reference"
    assert any("k/a (c0ffee) has no table points.csv" in d for d in row.reference_details)
    _table_run(ref / "nvidia-h200", points="kind,other\nr,1\n")
    row = claims.build(ledger, tmp_path / "results", ref, config).set_index("claim_id").loc["t.mean"]
    assert row.reference_verdict == "no-reference"
    assert any("has no column 'speedup' in points.csv" in d for d in row.reference_details)


def test_a_run_here_without_the_table_is_an_error_at_paper_scale_and_no_value_at_smoke(tmp_path):
    ledger, config = _stat_ledger(tmp_path)
    results = tmp_path / "results"
    _write(results, "k", "a", {"speedup": 1.0})
    with pytest.raises(claims.LedgerError, match=r"claim t.mean: run record .*k/a has no table points.csv"):
        claims.build(ledger, results, tmp_path / "reference", config)
    _write(results, "k", "a", {"speedup": 1.0}, scale="smoke")
    row = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id").loc["t.mean"]
    assert (row.here_verdict, row.here_measured) == ("smoke", "")
    (results / "k" / "a" / "points.csv").write_text(POINTS)
    row = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id").loc["t.mean"]
    assert (row.here_verdict, row.here_measured) == ("smoke", "2.33333")
    assert any(d.startswith("smoke-scale value here: mean of points.csv:speedup (kind=r) = 2.333") for d in row.here_details)


@pytest.mark.parametrize("metric,problem", [
    ({"experiment": "k/a", "table": "points.csv", "column": "speedup"}, "stat must be one of"),
    ({"experiment": "k/a", "table": "points.csv", "column": "speedup", "stat": "mode"}, "stat must be one of"),
    ({"experiment": "k/a", "table": "points.csv", "stat": "mean"}, "a table statistic needs exactly one of column and ratio"),
    ({"experiment": "k/a", "table": "points.csv", "column": "s", "ratio": ["a", "b"], "stat": "mean"},
     "a table statistic needs exactly one of column and ratio"),
    ({"experiment": "k/a", "table": "points.csv", "ratio": ["a"], "stat": "mean"}, "ratio must be"),
    ({"experiment": "k/a", "table": "points.csv", "ratio": [1, 2], "stat": "mean"}, "ratio must be"),
    ({"experiment": "k/a", "table": "points", "column": "s", "stat": "mean"}, "table must be the file name"),
    ({"experiment": "k/a", "table": "points.csv", "column": "s", "stat": "mean", "where": "kind=r"}, "where must be"),
    ({"experiment": "k/a", "table": "points.csv", "column": "s", "stat": "mean", "minus": "one"}, "minus must be"),
    ({"experiment": "k/a", "table": "points.csv", "column": "s", "stat": "mean", "colour": 1}, "unknown field"),
    ({"experiment": "k/a", "key": "s", "stat": "mean"}, r"unknown field\(s\) \['stat'\] beside key"),
    ({"experiment": "k/a"}, "needs key"),
    ({"experiment": "a", "key": "s"}, "experiment must be"),
])
def test_a_malformed_table_statistic_is_named_with_its_claim(tmp_path, metric, problem):
    ledger, _ = _stat_ledger(tmp_path, metric=metric)
    with pytest.raises(claims.LedgerError, match=rf"claim #1 \(t.mean\): metric must be .*: {problem}"):
        claims.load_ledger(ledger)
    ledger, _ = _stat_ledger(tmp_path, also=[{**metric, "target": 1, "direction": ">="}])
    with pytest.raises(claims.LedgerError, match=rf"claim #1 \(t.mean\): also #1 must be .*: {problem}"):
        claims.load_ledger(ledger)
    ledger, _ = _stat_ledger(tmp_path, ceiling={**metric, "note": "n"})
    with pytest.raises(claims.LedgerError, match=r"claim #1 \(t.mean\): ceiling must be .*" + problem):
        claims.load_ledger(ledger)


def test_an_also_condition_needs_its_target_and_direction(tmp_path):
    ledger, _ = _stat_ledger(tmp_path, also=[{"experiment": "k/a", "key": "s", "target": 1}])
    with pytest.raises(claims.LedgerError, match=r"also #1 must be .*missing \['direction'\]"):
        claims.load_ledger(ledger)


def test_a_target_other_than_the_papers_value_gives_its_reason(tmp_path):
    ledger, _ = _stat_ledger(tmp_path, target=1.5)
    assert claims.unexplained_targets(claims.load_ledger(ledger)) == ["t.mean"]
    ledger, _ = _stat_ledger(tmp_path, target=1.5, target_reason="a fixed baseline of today")
    assert claims.unexplained_targets(claims.load_ledger(ledger)) == []
    ledger, _ = _stat_ledger(tmp_path, paper_value=None, target=1.5)  # no paper value to sit at
    assert claims.unexplained_targets(claims.load_ledger(ledger)) == []
    for bad in ("", "two\nlines", 3):
        ledger, _ = _stat_ledger(tmp_path, target=1.5, target_reason=bad)
        with pytest.raises(claims.LedgerError, match=r"claim #1 \(t.mean\): target_reason must be one line"):
            claims.load_ledger(ledger)
    ledger, _ = _stat_ledger(tmp_path, target_reason="stale")
    with pytest.raises(claims.LedgerError, match=r"target_reason given, but the target is the paper's value"):
        claims.load_ledger(ledger)


def test_every_target_of_the_ledger_is_the_papers_value_or_says_why():
    ledger = claims.load_ledger(REPO / "config" / "claims")
    assert claims.unexplained_targets(ledger) == []


def test_a_model_row_shows_its_range_over_the_assumed_parameters_and_is_inconclusive_across_the_target(tmp_path):
    """A model claim names its tornado experiment (assumed:); the row says how far the assumed
    parameters move the headline and which moves it most; a range on both sides of the target is
    inconclusive (on the reference and here at paper scale), a range on one side keeps the verdict,
    a smoke run here shows the range unjudged, and a missing tornado run says so."""
    config = tmp_path / "config"
    (config / "experiment" / "k").mkdir(parents=True)
    for name in ("sim", "tornado"):
        (config / "experiment" / "k" / f"{name}.yaml").write_text(f"name: {name}\npaper: k\ngpus: 0\n")
    common = dict(paper="P", statement="s", paper_value=2.0, unit="x", direction=">=", kind="model",
                  metric={"experiment": "k/sim", "key": "speedup"}, assumed={"experiment": "k/tornado"})
    ledger = tmp_path / "claims.yaml"
    ledger.write_text(yaml.safe_dump({"claims": [
        {**common, "id": "across", "target": 1.5},   # 1.2-1.8 straddles 1.5
        {**common, "id": "below", "target": 2.0},    # 1.2-1.8 all below
        {**common, "id": "nothing", "target": 1.5, "assumed": {"experiment": "k/none"}},
    ]}))
    tornado = {"assumed_base": 1.4, "assumed_min": 1.2, "assumed_max": 1.8, "assumed_parameters": 5.0}
    ref, results = tmp_path / "reference" / "cpu", tmp_path / "results"
    for root in (ref, results):
        _write(root, "k", "sim", {"speedup": 1.4}, gpu=None)
        _write(root, "k", "tornado", tornado, gpu=None)
        rec = records.read(root / "k" / "tornado")
        records.write(root / "k" / "tornado", {**rec, "tags": {"assumed_largest": "system.dram_gbps"}})
    df = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id")
    across = df.loc["across"]
    assert across.reference_verdict == "inconclusive" and across.here_verdict == "inconclusive"
    assert across.verdict == "model" and across.reference_measured == "1.4"
    assert across.reference_details[0].startswith(
        "inconclusive: the assumed parameters move it 1.2-1.8: system.dram_gbps the most, across the target (>= 1.5) "
        "(5 parameters, one at a time over their stated ranges; tornado chart results/figures/k/tornado.png")
    assert "k/tornado" in across.experiments  # the row links the tornado's figure
    below = df.loc["below"]
    assert below.reference_verdict == "not-reproduced"
    assert any(d.startswith("assumed parameters move it 1.2-1.8: system.dram_gbps the most") for d in below.reference_details)
    nothing = df.loc["nothing"]
    assert nothing.reference_verdict == "not-reproduced"  # 1.4 < 1.5, no range to doubt it
    assert any(d.startswith("assumed parameters: their range is unknown (no committed run of k/none")
               for d in nothing.reference_details)
    assert claims.tally(df.reset_index(), "reference")["model inconclusive"] == 1

    for name in ("sim", "tornado"):  # at smoke scale here: the range is shown, nothing is judged
        rec = records.read(results / "k" / name)
        records.write(results / "k" / name, {**rec, "scale": "smoke"})
    smoke = claims.build(ledger, results, tmp_path / "reference", config).set_index("claim_id").loc["across"]
    assert smoke.here_verdict == "smoke"
    assert any(d.startswith("assumed parameters move it 1.2-1.8") for d in smoke.here_details)


def test_a_malformed_assumed_field_is_named(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump({"claims": [dict(id="x.y", paper="P", statement="s", paper_value=1, unit="x",
                                                   target=1, direction=">=", assumed="k/tornado")]}))
    with pytest.raises(claims.LedgerError, match=r"x.y.*assumed must be \{experiment: <paper>/<name>\}"):
        claims.load_ledger(bad)


def test_a_ratio_unit_that_mentions_a_percentage_stays_a_ratio():
    """A unit starting with "x" is judged as a ratio even where its description has a "%" (the
    sparsity "75 %"): its miss reads as a share of the ceiling, not a gap in the unit."""
    from repro.report.claims import is_difference, share_of_ceiling

    unit = "x over dense cuBLAS, one BERT-base encoder layer's GEMM time (fp16, 75 %)"
    assert not is_difference(unit, 1.95)
    assert is_difference("% top-1", 90) and is_difference("top-1 points lost", 0.5)
    share, text = share_of_ceiling({"direction": ">=", "unit": unit, "target": 1.95}, 1.3, 3.0)
    assert share == pytest.approx(1.3 / 3.0) and text == "0.433 of its ceiling"


def test_an_unavailable_claim_is_shown_as_unavailable_with_its_evidence_never_as_pending(setup, tmp_path):
    from repro.report import content, pages as report

    ledger, results, ref, config = setup
    entries = yaml.safe_load(ledger.read_text())["claims"]
    unavailable = {"checked": "2026-12-06", "why": "no SYCL compiler or CPU device installs here",
                   "evidence": "$ apt-cache search sycl\n(no SYCL package)"}
    entries.append(dict(id="a.nosycl", paper="P", statement="s", paper_value=1.0, unit="x", target=1.0,
                        direction=">=", needs="cpu", unavailable=unavailable))
    ledger.write_text(yaml.safe_dump({"claims": entries}))
    df = claims.build(ledger, results, ref, config).set_index("claim_id")
    row = df.loc["a.nosycl"]
    assert (row.verdict, row.reference_verdict, row.here_verdict) == ("unavailable",) * 3
    assert "checked 2026-12-06" in row.here_why and "$ apt-cache search sycl" in row.here_details
    assert claims.tally(df, "here")["unavailable"] == 1 and claims.tally(df, "here")["pending"] == 2  # a.pending, a.noexp
    report.write(df.reset_index(), tmp_path / "out", [], results=results, reference_root=ref)
    assert "unavailable" in (tmp_path / "out" / "report.html").read_text()
    cells = content.per_paper(df.reset_index()).set_index("paper")
    assert cells.loc["P", "pending"] == "2 pending, 1 unavailable"
    for bad in ({**unavailable, "checked": "yesterday"}, {k: v for k, v in unavailable.items() if k != "evidence"}):
        entries[-1]["unavailable"] = bad
        ledger.write_text(yaml.safe_dump({"claims": entries}))
        with pytest.raises(claims.LedgerError, match="unavailable must be"):
            claims.load_ledger(ledger)
    entries[-1].update(unavailable=unavailable, metric={"experiment": "k/fast", "key": "speedup"})
    entries[-1].pop("needs")
    ledger.write_text(yaml.safe_dump({"claims": entries}))
    with pytest.raises(claims.LedgerError, match="an unavailable claim has no metric"):
        claims.load_ledger(ledger)
