"""Publishing GPU runs as reference results."""

from repro import records
from repro.pipeline import reference


def _write(root, paper, name, gpu, inputs=None, scale="paper"):
    rec = dict(experiment=name, paper=paper, scale=scale, status="ok", params={}, metrics={"v": 1.0},
               inputs=inputs or {}, started="2026-12-01T00:00:00+00:00", reason=None,
               provenance={"gpu_name": gpu, "commit": "c0ffee", "dirty": False, "config_hash": "x", "hostname": "h"})
    records.write(root / paper / name, rec)


def test_publish_takes_gpu_runs_and_cpu_steps_that_only_combine_them(tmp_path):
    results, ref = tmp_path / "results", tmp_path / "reference"
    _write(results, "p", "arm", "NVIDIA H200")
    _write(results, "p", "smoke_arm", "NVIDIA H200", scale="smoke")
    _write(results, "p", "compare", None, inputs={"arm": "results/p/arm/record.json", "cfg": "config/x.yaml"})
    _write(results, "p", "other_gpu", "NVIDIA A100")
    _write(results, "p", "mixed", None, inputs={"a": "results/p/arm/record.json", "b": "results/p/other_gpu/record.json"})
    _write(results, "p", "cpu_only", None)
    (results / "figures" / "p").mkdir(parents=True)
    (results / "figures" / "p" / "compare.png").write_bytes(b"png")
    published = reference.publish(results, ref, "nvidia-h200")
    assert sorted(published) == ["p/arm", "p/compare"]
    assert (ref / "nvidia-h200" / "p" / "compare" / "record.json").exists()
    assert (ref / "nvidia-h200" / "figures" / "p" / "compare.png").read_bytes() == b"png"
    assert records.find_reference(ref, "p", "compare") == ref / "nvidia-h200" / "p" / "compare"
    # published, the comparison still finds its inputs among its neighbours (the claims report names its GPU)
    published_compare = records.read(ref / "nvidia-h200" / "p" / "compare")
    assert records.input_gpu_name(published_compare, ref / "nvidia-h200") == "NVIDIA H200"
    assert records.input_gpu_name(records.read(results / "p" / "mixed"), results) is None


def test_publish_takes_a_sweep_point_only_when_named_and_keeps_its_folder(tmp_path):
    results, ref = tmp_path / "results", tmp_path / "reference"
    _write(results, "p", "arm", "NVIDIA H200")
    point = results / "p" / "sweep" / "arm_e10"
    rec = records.read(results / "p" / "arm" / "record.json")
    records.write(point, rec)  # a point's record names the arm's experiment: it must not replace the arm's
    (results / "logs" / "p" / "sweep").mkdir(parents=True)
    (results / "logs" / "p" / "sweep" / "arm_e10.log").write_text("point log")
    assert reference.publish(results, ref, "nvidia-h200") == ["p/arm"]
    assert not (ref / "nvidia-h200" / "p" / "sweep").exists()
    assert reference.publish(results, ref, "nvidia-h200", only=["p/sweep/arm_e10"]) == ["p/sweep/arm_e10"]
    assert (ref / "nvidia-h200" / "p" / "sweep" / "arm_e10" / "record.json").exists()
    assert (ref / "nvidia-h200" / "logs" / "p" / "sweep" / "arm_e10.log").read_text() == "point log"
    assert (ref / "nvidia-h200" / "p" / "arm" / "record.json").exists()


def test_status_lists_published_records_and_what_predates_its_code(tmp_path, monkeypatch, capsys):
    """`status` names every published record (sweep points too), whether it shared the GPU or was
    resumed, and which ones the code has moved past: the list a GPU session would rerun."""
    from repro.pipeline import provenance

    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    src = tmp_path / "src" / "arm.py"
    src.parent.mkdir()
    src.write_text("def f():\n    return 1\n")
    root = tmp_path / "reference" / "nvidia-h200"
    _write(root, "p", "arm", "NVIDIA H200")
    _write(root / "p" / "sweep", "x", "point_e10", "NVIDIA H200")  # a sweep point, one folder deeper
    rec = records.read(root / "p" / "arm")
    rec["provenance"].update(code=provenance.code_digests([src]), gpu_sharing={"gpu_neighbours_max": 3})
    rec["tags"] = {"resumed": "lasso after epoch 35 from its checkpoint"}
    records.write(root / "p" / "arm", {k: v for k, v in rec.items() if not k.startswith("_")})
    rows = {r["record"]: r for r in reference.status(tmp_path / "reference", "nvidia-h200")}
    assert set(rows) == {"p/arm", "p/sweep/x/point_e10"}
    assert rows["p/arm"]["neighbours"] == 3 and rows["p/arm"]["resumed"] and rows["p/arm"]["stale"] == ""
    src.write_text("def f():\n    return 2\n")
    assert reference.main(["status", "--reference", str(tmp_path / "reference"), "--stale"]) == 0
    out = capsys.readouterr()
    assert "p/arm" in out.out and "shared(3) resumed" in out.out and "src/arm.py" in out.out
    assert "point_e10" not in out.out and "1 of 2 records predate" in out.err
    assert reference.main(["status", "--reference", str(tmp_path / "nowhere")]) == 1
