"""ZigZag's access counts on a small GEMM: what the tool must count whatever mapping it picks, and
the experiment end to end (a few seconds on the CPU)."""

import pytest

from repro.experiment import Context
from repro.papers.vectormesh import accesses, experiment


@pytest.fixture(scope="module")
def gemm_on_eyeriss(tmp_path_factory):
    return accesses.accesses(accesses.gemm(32, 32, 32), "eyeriss_like", "default", tmp_path_factory.mktemp("zz"))


def test_dram_holds_each_operand_once_and_the_macs_reach_the_innermost_levels(gemm_on_eyeriss):
    rows, cost = gemm_on_eyeriss
    by = {(r["operand"], r["depth"]): r for r in rows}
    words = 32 * 32 * 8 // 64  # a 32 x 32 operand of 8-bit values in the DRAM's 64-bit words (eyeriss_like.yaml)
    assert by[("I", 0)]["rd_out_to_low"] == by[("W", 0)]["rd_out_to_low"] == words  # read once each
    assert by[("O", 0)]["wr_in_by_low"] == words and by[("O", 0)]["rd_out_to_low"] == 0  # written once, never read back
    innermost = max(d for o, d in by if o == "W")
    assert by[("W", innermost)]["rd_out_to_low"] >= 32 ** 3 // 8  # every MAC reads its weight from a register file
    assert cost["latency_cycles"] > 0 and cost["energy_pj"] > 0


def test_the_experiment_tabulates_dram_and_buffer_reads(tmp_path):
    params = experiment.BaselinesParams(accelerators=[["eyeriss_like", "default"]],
                                        workloads=[{"name": "g", "kind": "gemm", "m": 16, "k": 16, "n": 16}])
    result = experiment.baselines(params, Context(out_dir=tmp_path))
    summary, table = result.tables["summary"].iloc[0], result.tables["accesses"]
    assert summary["dram_reads"] == table.loc[table.depth == 0, "rd_out_to_low"].sum() == 2 * 16 * 16 * 8 // 64
    assert summary["global_buffer"] == "sram_1M"  # eyeriss_like.yaml's largest on-chip memory
    assert summary["gb_reads"] == table.loc[table.level == "sram_1M", "rd_out_to_low"].sum()
    assert result.metrics["eyeriss_like_g_gb_reads"] == summary["gb_reads"] > 0
    assert result.tags["tool"].startswith("zigzag-dse ")


def test_bad_workloads_and_accelerators_are_refused(tmp_path):
    with pytest.raises(ValueError, match="workloads.x.kind"):
        experiment.baselines(experiment.BaselinesParams(workloads=[{"name": "x", "kind": "fft"}]), Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="workloads.y"):
        experiment.baselines(experiment.BaselinesParams(workloads=[{"name": "y", "kind": "gemm", "m": 4}]),
                             Context(out_dir=tmp_path))
    with pytest.raises(ValueError, match="ZigZag ships no 'tpu_huge'"):
        experiment.baselines(experiment.BaselinesParams(accelerators=[["tpu_huge", "default"]]), Context(out_dir=tmp_path))
