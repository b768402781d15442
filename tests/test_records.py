import json

import pytest

from repro import records


def _record(**kw):
    base = dict(experiment="e", paper="p", scale="smoke", status="ok", params={}, metrics={"m": 1.5},
                provenance={"config_hash": "abc", "hostname": "h"}, started="2026-01-01T00:00:00+00:00")
    return {**base, **kw}


def test_roundtrip_and_stable_id(tmp_path):
    path = records.write(tmp_path / "p" / "e", _record())
    rec = records.read(path)
    assert rec["metrics"] == {"m": 1.5}
    assert rec["record_id"] == records.record_id(_record())
    assert not list((tmp_path / "p" / "e").glob("*.tmp")), "temp files must not be left behind"
    assert records.find(tmp_path) == [path]


def test_corrupt_record_names_the_file(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"experiment": ')
    with pytest.raises(records.RecordError, match="corrupt run record"):
        records.read(path)


def test_missing_fields_and_bad_metrics(tmp_path):
    with pytest.raises(records.RecordError, match="lacks metrics"):
        records.validate({k: v for k, v in _record().items() if k != "metrics"})
    with pytest.raises(records.RecordError, match="must be a number"):
        records.validate(_record(metrics={"m": "fast"}))
    with pytest.raises(records.RecordError, match="status"):
        records.validate(_record(status="done"))


def test_missing_record_says_so(tmp_path):
    with pytest.raises(records.RecordError, match="no run record"):
        records.read(tmp_path)


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    records.atomic_write_text(path, json.dumps({"a": 1}))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("repro.atomic.os.replace", boom)
    with pytest.raises(OSError):
        records.atomic_write_text(path, json.dumps({"a": 2}))
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_commit_from_the_environment_wins_over_a_stale_git(monkeypatch):
    from repro.pipeline import provenance

    monkeypatch.delenv("REPRO_GIT_COMMIT", raising=False)
    here = provenance.git_state()
    assert len(here["commit"]) == 40  # this checkout's own HEAD
    monkeypatch.setenv("REPRO_GIT_COMMIT", "f" * 40)
    monkeypatch.setenv("REPRO_GIT_DIRTY", "0")
    assert provenance.git_state() == {"commit": "f" * 40, "dirty": False}


def test_gpu_neighbours_reads_what_was_measured():
    from repro.records import gpu_neighbours

    assert gpu_neighbours({"provenance": {"gpu_sharing": {"gpu_samples": 4, "gpu_neighbours_max": 2}}}) == 2
    # a GPU run whose neighbours could not be matched, and a CPU run: nothing measured (the claims'
    # shared-GPU note used to call .get on the "unknown" string)
    assert gpu_neighbours({"provenance": {"gpu_sharing": "unknown (nvidia-smi's processes could not be matched)"}}) is None
    assert gpu_neighbours({"provenance": {}}) is None
