"""Every Q-VR experiment file runs at smoke scale and its figure draws."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_smoke import check_claims, run  # noqa: E402


@pytest.mark.parametrize("name,keys", [
    ("traces", ["speedup", "speedup_max", "fps_gain", "qvr_quality", "events_per_s"]),
    ("bandwidth_sweep", ["stay_local_below_mbps_light", "stay_local_above_latency_ms_light", "speedup_at_max_bandwidth",
                         "events_per_s"]),
    ("sensitivity", ["base_speedup", "base_fps_gain", "sensitive", "events_per_s"]),
    ("tornado", ["assumed_base", "assumed_min", "assumed_max", "events_per_s"]),
])
def test_smoke(name, keys, tmp_path):
    result, fig = run(f"qvr/{name}", tmp_path)
    for k in keys:
        assert k in result.metrics and not math.isnan(result.metrics[k]), k
    assert result.tags["kind"] == "model"
    assert fig.axes



def test_claims_read_metrics_the_experiments_write(tmp_path):
    check_claims("qvr", tmp_path)
