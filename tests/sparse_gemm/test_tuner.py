"""The tuner: wrong or failing configurations are recorded and never chosen, the fastest good one
wins, the choice is cached per GPU and key and reloaded, and the table lists it."""

from __future__ import annotations

import json

import pytest

from repro.papers.sparse_gemm.tuner import CACHE_VERSION, Tuner, shape_key, tolerance


class Cfg:
    def __init__(self, name):
        self.name = name

    def as_dict(self):
        return {"name": self.name}


def test_choose_skips_wrong_and_failing_and_caches(tmp_path):
    cache = tmp_path / "t.json"
    tuner = Tuner(cache, "H200")
    configs = [Cfg("fast_wrong"), Cfg("slow"), Cfg("fast"), Cfg("broken")]
    times = {"fast_wrong": 1e-6, "slow": 5e-6, "fast": 2e-6}
    errs = {"fast_wrong": 0.5, "slow": 1e-4, "fast": float("nan")}

    def check(c):
        if c.name == "broken":
            raise RuntimeError("out of shared memory")
        return errs[c.name] if c.name != "fast" else 1e-4

    key = shape_key("tw", "float16", 128, 64, 64, 0.75)
    choice = tuner.choose(key, configs, lambda c: times[c.name], check, tol=1e-3)
    assert choice.name == "fast" and set(choice.times_us) == {"slow", "fast"}
    assert "WrongResult" in choice.errors["fast_wrong"] and "shared memory" in choice.errors["broken"]
    data = json.loads(cache.read_text())
    assert data["version"] == CACHE_VERSION and key in data["gpus"]["H200"]
    again = Tuner(cache, "H200").choose(key, configs, lambda c: pytest.fail("re-timed"), check, 1e-3)
    assert again.name == "fast"
    assert Tuner(cache, "other GPU").lookup(key) is None
    table = tuner.table([key])
    assert list(table.chosen) == ["fast"] and int(table.failed[0]) == 2


def test_nan_error_is_wrong_and_nothing_good_raises():
    tuner = Tuner(None, "H200")
    with pytest.raises(RuntimeError, match="no configuration"):
        tuner.choose("k", [Cfg("a")], lambda c: 1.0, lambda c: float("nan"), tol=1.0)


def test_tolerance_follows_the_dtype():
    assert tolerance("bfloat16") == 8 * tolerance("float16")
