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


def _source_and_card(tmp_path, monkeypatch):
    """A repository root at tmp_path holding one source file (src/arm.py, ``f`` returning 1) and the
    H200 card's reference folder below it: (the source, the card folder)."""
    from repro.pipeline import provenance

    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    src = tmp_path / "src" / "arm.py"
    src.parent.mkdir()
    src.write_text("def f():\n    return 1\n")
    return src, tmp_path / "reference" / "nvidia-h200"


def test_status_lists_published_records_and_what_predates_its_code(tmp_path, monkeypatch, capsys):
    """`status` names every published record (sweep points too), whether it shared the GPU or was
    resumed, and which ones the code has moved past: the list a GPU session would rerun."""
    from repro.pipeline import provenance

    src, root = _source_and_card(tmp_path, monkeypatch)
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


def _git_repo(root):
    import subprocess

    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)

    def commit():
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "x"], check=True)
        return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    return commit


def test_status_counts_a_scoped_judgment_for_its_records_only(tmp_path, monkeypatch):
    """A judgment's ``records`` name records by their experiment key (which covers a sweep point that
    ran that experiment) or by their folder below the card (that record alone); the others with the
    same change of the same file stay stale."""
    from repro.pipeline import provenance

    src, root = _source_and_card(tmp_path, monkeypatch)
    _write(root, "p", "other", "NVIDIA H200")
    _write(root, "p", "arm", "NVIDIA H200")
    rec = {k: v for k, v in records.read(root / "p" / "arm").items() if not k.startswith("_")}
    records.write(root / "p" / "sweep" / "arm_e10", rec)  # a sweep point's record names the arm it ran
    for folder in ("p/arm", "p/sweep/arm_e10", "p/other"):
        rec = records.read(root / folder)
        rec["provenance"]["code"] = provenance.code_digests([src])
        records.write(root / folder, {k: v for k, v in rec.items() if not k.startswith("_")})
    was = provenance.source_digest(src)
    src.write_text("def f():\n    return 2\n")
    now = provenance.present_digest("src/arm.py")
    (tmp_path / "config").mkdir()

    def stale(scope):
        (tmp_path / "config" / "unmoved.yaml").write_text(
            f"- file: src/arm.py\n  was: {was}\n  now: {now}\n  records: {scope}\n  reason: r\n")
        return sorted(r["record"] for r in reference.status(tmp_path / "reference", "nvidia-h200") if r["stale"])

    assert stale(["p/sweep/arm_e10"]) == ["p/arm", "p/other"]  # a folder: that point alone
    assert stale(["p/arm"]) == ["p/other"]  # a key: the arm and the point that ran it
    assert stale(["p/other", "p/sweep/arm_e10"]) == ["p/arm"]


def test_status_of_an_older_record_counts_an_added_file_judged_for_it(tmp_path, monkeypatch):
    """A record without ``provenance.code`` is checked by its closure today (_code_paths): a file added
    to it since the record's commit counts until a judgment ``was: absent`` names the record."""
    from repro.pipeline import provenance

    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    commit = _git_repo(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "arm.py").write_text("def f():\n    return 1\n")
    old = commit()
    (tmp_path / "src" / "gpt.py").write_text("class GPT:\n    pass\n")
    commit()
    monkeypatch.setattr(reference, "_code_paths", lambda rec: ["src/arm.py", "src/gpt.py"])
    root = tmp_path / "results" / "reference" / "nvidia-h200"
    for name in ("arm", "other"):
        _write(root, "p", name, "NVIDIA H200")
        rec = records.read(root / "p" / name)
        rec["provenance"]["commit"] = old
        records.write(root / "p" / name, {k: v for k, v in rec.items() if not k.startswith("_")})
    rows = {r["record"]: r["stale"] for r in reference.status(tmp_path / "results" / "reference", "nvidia-h200")}
    assert "src/gpt.py" in rows["p/arm"] and "src/gpt.py" in rows["p/other"]
    (tmp_path / "config").mkdir()
    assert reference.main(["judge", "src/gpt.py", "--since", old, "--reason", "p/arm builds no GPT",
                           "--records", "p/arm"]) == 0
    rows = {r["record"]: r["stale"] for r in reference.status(tmp_path / "results" / "reference", "nvidia-h200")}
    assert rows["p/arm"] == "" and "src/gpt.py" in rows["p/other"]
