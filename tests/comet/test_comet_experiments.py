"""The COMET experiments end to end at smoke size on the CPU (NumPy codec), compare on synthetic
records, the configs at both scales, the figures, and bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from conftest import prepared_splits, experiment_cfg
from repro import records
from repro.papers.comet import figures
from repro.papers.comet.arms import ArmParams, train_arm
from repro.papers.comet.compare import CompareParams, compare
from repro.papers.comet.compressor_bench import BenchParams, compressor_bench
from repro.papers.comet.max_batch import MaxBatchParams, largest_batch, max_batch
from repro.papers.comet.step_bench import StepBenchParams, step_bench
from repro.papers.comet.sz3_reference import SZ3Params, sz3_reference
from repro.experiment import Context, load_entry

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "experiment" / "comet"
TINY = dict(model="resnet20", model_kw={"width": 4}, batch_size=16, n_train=32, n_test=32, epochs=1,
            channels_last=False, checkpoint=False, min_numel=1024, retune_every=1)
ARMS = {"uncompressed": "none", "fixed_eb": "fixed", "adaptive_eb": "adaptive", "actnn2bit": "actnn"}


def _save_tables(result, run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    for name, table in result.tables.items():
        table.to_csv(run / f"{name}.csv", index=False)


def _write_record(d: Path, experiment: str, result, params: dict | None = None) -> Path:
    _save_tables(result, d)
    records.write(d, dict(experiment=experiment, paper="comet", scale="smoke", status="ok", params=params or {},
                          metrics={k: float(v) for k, v in result.metrics.items()}, provenance={},
                          artifacts={k: Path(v).name for k, v in result.artifacts.items()},
                          started="2025-01-01T00:00:00+00:00"))
    return d / "record.json"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 96, 64)


@pytest.fixture(scope="module")
def arms(prepared, tmp_path_factory):
    out = {}
    for name, method in ARMS.items():
        d = tmp_path_factory.mktemp(name)
        params = ArmParams(**TINY, method=method)
        result = train_arm(params, Context(out_dir=d, scale="smoke", device="cpu", seed=1, inputs=prepared))
        out[name] = (_write_record(d, f"comet_{name}", result, dataclasses.asdict(params)), result)
    return out


@pytest.mark.parametrize("name", list(ARMS))
def test_arm_smoke(arms, name):
    _, result = arms[name]
    m = result.metrics
    for key in ("final_top1", "images_per_s", "act_mem_bytes", "act_raw_bytes", "act_ratio", "peak_mem_bytes"):
        assert key in m, key
    assert m["act_raw_bytes"] > 0 and m["act_mem_bytes"] == m["act_stored_bytes"]  # CPU: accounted bytes
    layers = result.tables["layers"]
    assert layers.raw_bytes.sum() == m["act_raw_bytes"] and layers.stored_bytes.sum() == m["act_stored_bytes"]
    if name == "uncompressed":
        assert m["act_ratio"] == 1.0 and "train_ratio" not in m
        assert result.tags["mode"] == "eager" and result.tags["mode_notes"] == "none"  # no hooks in training
    else:
        assert m["act_ratio"] > 1.5 and m["train_ratio"] > 1.5
        assert "eager" in result.tags["mode"]
    if name == "adaptive_eb":
        d = result.tables["decisions"]
        assert m["retunes"] >= 2 and {"weight-gradient", "batchnorm"} == set(d.rule)
        assert (layers.eb > 0).all()
    assert result.artifacts["model"].is_file()


def test_actnn_ratio_follows_its_format(arms):
    """ActNN's ratio is fixed by its format: 32 bits -> 2 bits + 8 bytes per 256-value group, and one
    bit more for a ReLU's output (its exact mask)."""
    m = arms["actnn2bit"][1].metrics
    assert 32 / (2 + 64 / 256 + 1) * 0.95 <= m["act_ratio"] <= 32 / (2 + 64 / 256) * 1.05


def test_compare_from_arm_records(arms, tmp_path):
    inputs = {name: path for name, (path, _) in arms.items()}
    result = compare(CompareParams(), Context(out_dir=tmp_path / "cmp", inputs=inputs))
    m = result.metrics
    base, ours, actnn = (arms[n][1].metrics for n in ("uncompressed", "adaptive_eb", "actnn2bit"))
    assert m["mem_reduction"] == pytest.approx(base["act_mem_bytes"] / ours["act_mem_bytes"])
    assert m["vs_actnn"] == pytest.approx(actnn["act_mem_bytes"] / ours["act_mem_bytes"])
    assert m["top1_loss"] == pytest.approx(base["final_top1"] - ours["final_top1"])
    assert m["throughput_ratio"] == pytest.approx(ours["images_per_s"] / base["images_per_s"])
    assert list(result.tables["arms"].arm) == list(ARMS)
    _save_tables(result, tmp_path / "cmp")
    records.write(tmp_path / "cmp", dict(experiment="comet_compare", paper="comet", scale="smoke", status="ok",
                                          params={}, metrics=m, provenance={}, started="2025-01-01T00:00:00+00:00"))
    figures.compare(tmp_path / "cmp")
    del inputs["actnn2bit"]
    with pytest.raises(records.RecordError, match="inputs.actnn2bit is missing"):
        compare(CompareParams(), Context(out_dir=tmp_path / "cmp2", inputs=inputs))
    with pytest.raises(ValueError, match="ours must be"):
        compare(CompareParams(ours="actnn2bit"), Context(out_dir=tmp_path / "cmp3", inputs=inputs))


@pytest.mark.parametrize("name", list(ARMS))
def test_arm_figures_render(arms, name):
    path, _ = arms[name]
    fig = figures.train_arm(path.parent)
    assert len(fig.axes) >= (3 if name == "adaptive_eb" else 2)


def test_sz3_reference(arms, prepared, tmp_path):
    inputs = {"uncompressed": arms["uncompressed"][0], "test": prepared["test"]}
    result = sz3_reference(SZ3Params(batch=4, ebs=[0.05], min_numel=1024),
                           Context(out_dir=tmp_path / "sz3", inputs=inputs))
    m, table = result.metrics, result.tables["sz3"]
    assert m["ours_ratio_eb0.05"] > 1.5 and m["ours_max_err_over_eb"] <= 1.0
    assert len(table) >= 10 and (table.ours_max_err <= table.eb).all()
    # the entropy stages' size model over the same codes: per tensor, no larger than the bit planes
    # plus their own per-block offsets and code book
    assert (table.huffman_bytes > 0).all() and m["huffman_ratio_eb0.05"] > 1
    assert m["huffman_runs_ratio_eb0.05"] > 1 and "size model" in result.tags["huffman"]
    try:
        import pysz  # noqa: F401
    except ImportError:
        assert result.tags["sz3"].startswith("skipped: pysz is not installed")
    else:
        assert m["sz3_max_err_over_eb"] <= 1.0 + 1e-6 and m["sz3_ratio_eb0.05"] > 1
    _save_tables(result, tmp_path / "sz3")
    figures.sz3_reference(tmp_path / "sz3")
    with pytest.raises(records.RecordError, match="inputs.uncompressed is missing"):
        sz3_reference(SZ3Params(), Context(out_dir=tmp_path / "x", inputs={"test": prepared["test"]}))


def test_compressor_bench_on_cpu(tmp_path):
    p = BenchParams(size_mib=1, ebs=[0.01, 0.05], repeats=1)
    result = compressor_bench(p, Context(out_dir=tmp_path, device="cpu"))
    bench = result.tables["bench"]
    assert len(bench) == 8 and (bench.max_err_over_eb <= 1.0).all() and (bench.ratio > 1).all()
    assert result.metrics["compress_gbps"] > 0 and "stream_match_relu_smooth" not in result.metrics
    v3, v4 = bench[bench.codec == "v3"].reset_index(drop=True), bench[bench.codec == "v4"].reset_index(drop=True)
    assert len(v3) == len(v4) == 4 and (v4.ratio > v3.ratio).all()  # the v4 arm, beside v3 on the same data
    assert result.metrics["v4_ratio"] == v4[(v4.kind == "relu_smooth") & (v4.eb == 0.05)].ratio.iloc[0]
    assert result.metrics["v4_compress_gbps"] > 0 and result.metrics["v4_max_err_over_eb"] <= 1
    assert result.metrics["ratio"] == v3[(v3.kind == "relu_smooth") & (v3.eb == 0.05)].ratio.iloc[0]
    bench = v3
    relu = bench[bench.kind == "relu_smooth"]
    assert (relu.density < 0.7).all() and (relu.ratio.values > bench[bench.kind == "gaussian"].ratio.values).all()
    _save_tables(result, tmp_path)
    figures.compressor_bench(tmp_path)
    with pytest.raises(ValueError, match="kinds: unknown value"):
        compressor_bench(BenchParams(size_mib=1, kinds=["jpeg"]), Context(out_dir=tmp_path, device="cpu"))
    with pytest.raises(ValueError, match="primary_kind/primary_eb"):
        compressor_bench(BenchParams(size_mib=1, ebs=[0.1]), Context(out_dir=tmp_path, device="cpu"))
    with pytest.raises(ValueError, match="codecs: unknown value 'v5'"):
        compressor_bench(BenchParams(size_mib=1, codecs=["v3", "v5"]), Context(out_dir=tmp_path, device="cpu"))
    with pytest.raises(ValueError, match="layouts: unknown value 'nchw'"):
        compressor_bench(BenchParams(size_mib=1, layouts=["flat", "nchw"]), Context(out_dir=tmp_path, device="cpu"))


def test_bad_method_is_rejected(prepared, tmp_path):
    with pytest.raises(ValueError, match="method must be one of"):
        train_arm(ArmParams(**TINY, method="jpeg"), Context(out_dir=tmp_path, inputs=prepared))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("[!_]*.yaml")), ids=lambda p: p.stem)  # _*.yaml: abstract bases
def test_configs_validate_at_both_scales(path):
    from repro.pipeline.run import experiment_params

    cfg = experiment_cfg(f"comet/{path.stem}")
    assert cfg.paper == "comet" and cfg.name == path.stem
    spec = load_entry(cfg.entry)
    paper, smoke = experiment_params(spec, cfg, "paper"), experiment_params(spec, cfg, "smoke")
    module, _, fn = cfg.figure.partition(":")
    assert module == "repro.papers.comet.figures" and hasattr(figures, fn)
    if isinstance(paper, ArmParams):
        assert paper.epochs == 10 and not paper.cuda_graph and paper.precision == "fp32"
        assert smoke.epochs <= 2 and smoke.n_train <= 256
    if isinstance(paper, BenchParams):
        assert paper.size_mib == 1024 and smoke.size_mib <= 4


def test_arm_configs_share_one_schedule():
    keys = ("epochs", "batch_size", "lr", "schedule", "weight_decay", "model", "channels_last")
    cfgs = [c.params for c in (experiment_cfg(f"comet/{p.stem}") for p in sorted(CONFIGS.glob("comet_*.yaml")))
            if "method" in c.params]
    assert len(cfgs) == 4
    assert pd.DataFrame([{k: c[k] for k in keys} for c in cfgs]).nunique().max() == 1


def test_largest_batch_search():
    calls = []

    def fits(b):
        calls.append(b)
        return b <= 1000

    assert largest_batch(fits, 128, 65536, 64) >= 1000 - 64 and max(calls) == 1024
    assert largest_batch(lambda b: b <= 1000, 128, 65536, 1) == 1000
    assert largest_batch(lambda b: b <= 5, 128, 65536, 1) == 5  # below the start: searched down
    assert largest_batch(lambda b: False, 8, 64, 1) == 0
    assert largest_batch(lambda b: True, 8, 100, 1) == 100  # fits up to the limit, the limit itself probed
    with pytest.raises(ValueError, match="start <= limit"):
        largest_batch(fits, 0, 10, 1)


def test_max_batch_smoke(tmp_path):
    p = MaxBatchParams(model="resnet20", model_kw={"width": 4}, cap_mib=1, start=2, limit=64, resolution=4,
                       channels_last=False, min_numel=1024)
    result = max_batch(p, Context(out_dir=tmp_path, device="cpu"))
    m, probes = result.metrics, result.tables["probes"]
    assert m["max_batch_none"] >= 2 and m["batch_ratio_fixed"] > 1.5 and m["batch_ratio_actnn"] > m["batch_ratio_fixed"]
    for method, rows in probes.groupby("method"):
        best = m[f"max_batch_{method}"]
        assert rows[rows.batch == best].fits.all() and not rows[rows.batch > best].fits.any()
    _save_tables(result, tmp_path)
    records.write(tmp_path, dict(experiment="comet_max_batch", paper="comet", scale="smoke", status="ok",
                                 params=dataclasses.asdict(p), metrics=m, provenance={},
                                 started="2025-01-01T00:00:00+00:00"))
    figures.max_batch(tmp_path)
    with pytest.raises(ValueError, match="methods must include .none."):
        max_batch(MaxBatchParams(methods=["fixed"]), Context(out_dir=tmp_path, device="cpu"))


def test_step_bench_times_every_arm_and_feeds_compare(arms, tmp_path):
    p = StepBenchParams(model="resnet20", model_kw={"width": 4}, batch_size=8, channels_last=False, min_numel=1024,
                        warmup=1, steps=2, rounds=2)
    result = step_bench(p, Context(out_dir=tmp_path / "bench", device="cpu", seed=1))
    m, steps = result.metrics, result.tables["steps"]
    assert len(steps) == 2 * len(ARMS) and (steps.step_s > 0).all()
    assert m["speed_ratio_none"] == 1.0 and m["host_codec_ms_none"] == 0.0
    for method in ("fixed", "adaptive", "actnn"):
        assert m[f"host_codec_ms_{method}"] > 0  # the hooks really encoded and decoded
        assert m[f"speed_ratio_{method}"] == pytest.approx(m[f"images_per_s_{method}"] / m["images_per_s_none"])
    bench = _write_record(tmp_path / "bench", "comet_step_bench", result, dataclasses.asdict(p))
    figures.step_bench(tmp_path / "bench")
    inputs = {name: path for name, (path, _) in arms.items()} | {"step_bench": bench}
    cmp = compare(CompareParams(), Context(out_dir=tmp_path / "cmp", inputs=inputs))
    assert cmp.metrics["throughput_ratio"] == pytest.approx(m["speed_ratio_adaptive"])
    assert cmp.tags["throughput_ratio"].startswith("step_bench")
    with pytest.raises(ValueError, match="must include 'none'"):
        step_bench(StepBenchParams(methods=["fixed"]), Context(out_dir=tmp_path, device="cpu"))
    with pytest.raises(ValueError, match="need a CUDA device"):
        step_bench(dataclasses.replace(p, graph_methods=["none", "fixed"]), Context(out_dir=tmp_path, device="cpu"))
    with pytest.raises(ValueError, match="graph_methods: unknown value 'adaptive'"):
        step_bench(dataclasses.replace(p, graph_methods=["none", "adaptive"]), Context(out_dir=tmp_path, device="cpu"))


def test_step_bench_arena_arms_on_cpu(tmp_path):
    """On the CPU the arena payload changes nothing (the NumPy codec has no host sync to save), but
    its arms run and are named apart."""
    p = StepBenchParams(model="resnet20", model_kw={"width": 4}, batch_size=8, channels_last=False, min_numel=1024,
                        methods=["none", "fixed"], payloads=["exact", "arena"], warmup=1, steps=1, rounds=1)
    result = step_bench(p, Context(out_dir=tmp_path, device="cpu"))
    assert list(result.tables["steps"].arm) == ["none", "fixed", "fixed@arena"]
    assert result.metrics["host_codec_ms_fixed_arena"] > 0 and "speed_ratio_fixed_arena" in result.metrics
