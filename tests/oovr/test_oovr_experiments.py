"""Every OO-VR experiment file runs at smoke scale and its figure draws."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import check_claims, run  # noqa: E402


@pytest.mark.parametrize("name,keys", [
    ("scenes", ["speedup", "traffic_reduction", "oovr_imbalance", "events_per_s"]),
    ("link_sweep", ["advantage_gone_gbps", "speedup_at_max_asymmetry", "events_per_s"]),
    ("sensitivity", ["base_speedup", "sensitive", "largest_rel_change", "events_per_s"]),
    ("tornado", ["assumed_base", "assumed_min", "assumed_max", "events_per_s"]),
])
def test_smoke(name, keys, tmp_path):
    result, fig = run(f"oovr/{name}", tmp_path)
    for k in keys:
        assert k in result.metrics and not math.isnan(result.metrics[k]), k
    assert result.metrics["events_per_s"] > 0
    assert result.tags["kind"] == "model"
    assert fig.axes



def test_claims_read_metrics_the_experiments_write(tmp_path):
    check_claims("oovr", tmp_path)
