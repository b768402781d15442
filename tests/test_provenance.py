"""Provenance helpers: who else computed on the GPU while a run lasted."""

import os

import pytest

from repro.figures import run_subtitle
from repro.machine import GpuNeighbours, _ancestors


def _watch(samples, children=(), uuid=None):
    """A watcher fed canned nvidia-smi samples (PID lists, all on GPU "a", or (PID, UUID) lists);
    ``children`` are PIDs whose parent is this process."""
    me = os.getpid()
    it = iter([s if s is None or not s or isinstance(s[0], tuple) else [(p, "a") for p in s] for s in samples])
    return GpuNeighbours(interval_s=3600, sample=lambda: next(it), uuid=uuid,
                         ancestors=lambda pid: {pid, me} if pid in children or pid == me else {pid})


def test_counts_other_processes_but_not_ours_or_our_children():
    me = os.getpid()
    w = _watch([[me, 111, 222], [me, 4242], [4242]], children=(4242,))
    for _ in range(3):
        w.poll()
    assert w.summary() == {"gpu_samples": 3, "gpu_neighbours_max": 2}


def test_alone_is_zero_neighbours():
    w = _watch([[os.getpid()]])
    w.poll()
    assert w.summary() == {"gpu_samples": 1, "gpu_neighbours_max": 0}


def test_unknown_when_our_process_never_shows_up_or_no_samples():
    w = _watch([[111, 222], None])
    w.poll()
    w.poll()
    assert w.summary() is None  # other PID namespace: cannot tell ours from theirs
    assert _watch([]).summary() is None


def test_only_processes_on_our_gpu_count():
    me = os.getpid()
    w = _watch([[(me, "aa"), (11, "bb"), (12, "GPU-AA".lower()[4:])]], uuid="GPU-AA")
    w.poll()
    assert w.summary() == {"gpu_samples": 1, "gpu_neighbours_max": 1}  # 11 is on another GPU


def test_context_manager_samples_at_exit_even_for_short_runs():
    me = os.getpid()
    w = GpuNeighbours(interval_s=3600, sample=lambda: [(me, "a"), (7, "a")], ancestors=lambda pid: {pid})
    with w:
        pass
    assert w.summary() == {"gpu_samples": 1, "gpu_neighbours_max": 1}


def test_ancestors_of_this_process_include_itself_and_its_parent():
    chain = _ancestors(os.getpid())
    assert os.getpid() in chain and (os.getppid() in chain or os.getppid() <= 1)


def test_subtitle_says_when_the_gpu_was_shared():
    rec = {"provenance": {"gpu_name": "NVIDIA H200", "gpu_sharing": {"gpu_samples": 5, "gpu_neighbours_max": 2}},
           "scale": "paper"}
    assert "GPU shared with up to 2 other process(es)" in run_subtitle(rec)
    rec["provenance"]["gpu_sharing"] = {"gpu_samples": 5, "gpu_neighbours_max": 0}
    assert "shared" not in run_subtitle(rec)


def test_subtitle_of_a_cpu_step_names_the_gpu_of_its_inputs(tmp_path):
    import json

    from repro.figures import run_record

    gpu_run = tmp_path / "results" / "comet" / "arm"
    gpu_run.mkdir(parents=True)
    full = dict(experiment="arm", paper="comet", scale="paper", status="ok", params={}, metrics={},
                started="2026-12-01T00:00:00+00:00")
    (gpu_run / "record.json").write_text(json.dumps({**full, "provenance": {"gpu_name": "NVIDIA H200"}}))
    step = tmp_path / "results" / "comet" / "sweep"
    step.mkdir()
    (step / "record.json").write_text(json.dumps({"provenance": {"gpu_name": None}, "device": "cpu",
                                                  "inputs": {"arm": "results/comet/arm/record.json"}}))
    assert run_subtitle(run_record(step)).startswith("NVIDIA H200 (CPU step over its records)")
    (step / "record.json").write_text(json.dumps({"provenance": {}, "device": "cpu", "inputs": {}}))
    assert run_subtitle(run_record(step)).startswith("cpu")
    (gpu_run / "record.json").write_text("{}")  # an unreadable input: the step's own machine
    (step / "record.json").write_text(json.dumps({"provenance": {}, "device": "cpu",
                                                  "inputs": {"arm": "results/comet/arm/record.json"}}))
    assert run_subtitle(run_record(step)).startswith("cpu")


def test_gpu_board_picks_our_card_by_uuid_and_host_info_reads_proc(tmp_path):
    from repro.machine import gpu_board, host_info

    rows = ["GPU-aaaa, 1980, 700.00", "GPU-BBBB, 1755, [N/A]"]
    assert gpu_board("bbbb", query=lambda fields: rows) == {
        "gpu_uuid": "bbbb", "gpu_clock_max_sm_mhz": 1755.0, "gpu_power_limit_w": None}
    assert gpu_board("cccc", query=lambda fields: rows) == {"gpu_uuid": "cccc"}  # not listed: the UUID alone
    assert gpu_board(None, query=lambda fields: rows) == {}  # no CUDA device

    def broken(fields):
        raise OSError("no nvidia-smi")
    assert gpu_board("aaaa", query=broken) == {}
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\n")
    (tmp_path / "meminfo").write_text("MemTotal:       1024 kB\nMemFree: 1 kB\n")
    info = host_info.__wrapped__(tmp_path)
    assert info["cpu_model"] == "Example CPU @ 2.0GHz" and info["host_memory_bytes"] == 1024 * 1024
    assert info["cpu_count"] >= 1
    assert "cpu_model" not in host_info.__wrapped__(tmp_path / "missing")  # unreadable: left out


def _repo(tmp_path, monkeypatch):
    """A git repository standing in for the project: provenance reads files and history there."""
    import subprocess

    from repro.pipeline import provenance

    root = tmp_path / "repo"
    (root / "src" / "repro").mkdir(parents=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", root)
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", root / "src" / "repro")
    provenance.definition_index.cache_clear()

    def commit(files: dict[str, str]) -> str:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            if text is None:
                (root / rel).unlink()
            else:
                (root / rel).write_text(text)
        git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "x"], check=True)
        provenance.definition_index.cache_clear()
        return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    return root, commit


def test_code_that_only_moved_between_files_is_not_a_change(tmp_path, monkeypatch):
    """A record's file that changed since it ran counts as changed only if some definition it had is
    gone or different: moving a function to another module, or editing an import, is not a change."""
    from repro.pipeline import provenance

    root, commit = _repo(tmp_path, monkeypatch)
    a, b = "src/repro/a.py", "src/repro/b.py"
    old = commit({a: "import os\nK = 2\n\ndef f(x):\n    return x * K\n\ndef g(x):\n    return f(x) + 1\n"})
    digests = provenance.code_digests([root / a])
    commit({a: "from repro.b import f, K\n\ndef g(x):\n    return f(x) + 1\n",
            b: '"""Moved here."""\nK = 2\n\ndef f(x):\n    return x * K  # same\n'})
    assert provenance.changed_code(digests, old) == []  # everything moved, unchanged
    assert provenance.changed_code(digests) == [a]  # without the commit only the digest can tell
    commit({b: '"""Moved here."""\nK = 3\n\ndef f(x):\n    return x * K\n'})
    assert provenance.changed_code(digests, old) == [a]  # K is different now


def test_an_experiment_file_rewritten_as_a_variant_runs_the_same(tmp_path, monkeypatch):
    from repro import layout
    from repro.pipeline import provenance

    root, commit = _repo(tmp_path, monkeypatch)
    monkeypatch.setenv("REPRO_CONFIG_DIR", str(root / "config"))
    layout._experiment_file.cache_clear()
    base = "config/experiment/p/base.yaml"
    var = "config/experiment/p/var.yaml"
    old = commit({base: "name: base\npaper: p\nentry: repro.p.old:arm\nparams: {lr: 0.1, epochs: 4}\n",
                  var: "name: var\npaper: p\nentry: repro.p.old:arm\nparams: {lr: 0.1, epochs: 8}\n"})
    digests = provenance.code_digests([root / var])
    commit({base: "name: base\npaper: p\nentry: repro.p.arms:arm\ngpus: 1\nparams: {lr: 0.1, epochs: 4}\n",
            var: "defaults:\n  - /experiment/p/base\n  - _self_\nname: var\nparams: {epochs: 8}\n"})
    layout._experiment_file.cache_clear()
    assert provenance.changed_code(digests, old) == []
    commit({var: "defaults:\n  - /experiment/p/base\n  - _self_\nname: var\nparams: {epochs: 9}\n"})
    layout._experiment_file.cache_clear()
    assert provenance.changed_code(digests, old) == [var]


def test_a_smoke_only_change_leaves_a_paper_scale_record_as_it_was(tmp_path, monkeypatch):
    """An experiment file's ``smoke`` section is read at smoke scale only: changing it leaves a
    paper-scale record's code as it was, and counts for a smoke record; a ``params`` change counts
    for both."""
    from repro import layout
    from repro.pipeline import provenance

    root, commit = _repo(tmp_path, monkeypatch)
    monkeypatch.setenv("REPRO_CONFIG_DIR", str(root / "config"))
    exp = "config/experiment/p/e.yaml"
    old = commit({exp: "name: e\npaper: p\nentry: m:f\ngpus: 0\nparams: {n: 100}\nsmoke: {n: 10}\n"})
    digests = provenance.code_digests([root / exp])
    commit({exp: "name: e\npaper: p\nentry: m:f\ngpus: 0\nparams: {n: 100}\nsmoke: {n: 5}\n"})
    layout._experiment_file.cache_clear()
    assert provenance.changed_code(digests, old, "paper") == []
    assert provenance.changed_code(digests, old, "smoke") == [exp]
    assert provenance.changed_code(digests, old) == [exp]  # scale unknown: both sections count
    commit({exp: "name: e\npaper: p\nentry: m:f\ngpus: 0\nparams: {n: 200}\nsmoke: {n: 5}\n"})
    layout._experiment_file.cache_clear()
    assert provenance.changed_code(digests, old, "paper") == [exp]


def test_an_abstract_base_counts_through_the_experiments_built_on_it(tmp_path, monkeypatch):
    """Keys that two experiment files shared, moved into a new abstract base, compute what they did (the
    base is new since the record, but each experiment runs the same); a later edit of the base that
    changes an experiment whose own file did not change counts."""
    from repro import layout
    from repro.pipeline import provenance

    root, commit = _repo(tmp_path, monkeypatch)
    monkeypatch.setenv("REPRO_CONFIG_DIR", str(root / "config"))
    a, b, base = (f"config/experiment/p/{n}.yaml" for n in ("a", "b", "_base"))
    old = commit({a: "name: a\npaper: p\nentry: m:f\ngpus: 1\nparams: {lr: 0.1, n: 1}\n",
                  b: "name: b\npaper: p\nentry: m:f\ngpus: 1\nparams: {lr: 0.1, n: 2}\n"})
    commit({base: "paper: p\nentry: m:f\ngpus: 1\nparams: {lr: 0.1}\n",
            a: "defaults: [/experiment/p/_base, _self_]\nname: a\nparams: {n: 1}\n",
            b: "defaults: [/experiment/p/_base, _self_]\nname: b\nparams: {n: 2}\n"})
    layout._experiment_file.cache_clear()
    assert sorted(provenance.changed_since(old, [a, base])) == sorted([a, base])
    assert provenance.computes_the_same(a, old) and provenance.computes_the_same(base, old)
    later = commit({b: "defaults: [/experiment/p/_base, _self_]\nname: b\nparams: {n: 2, lr: 0.1}\n"})
    commit({base: "paper: p\nentry: m:f\ngpus: 1\nparams: {lr: 0.2}\n"})
    layout._experiment_file.cache_clear()
    assert not provenance.computes_the_same(base, later)  # a's lr moved with it, and a.yaml did not change
    assert provenance.computes_the_same(b, later)  # b states its own lr


def test_a_change_judged_unmoved_is_not_stale_and_a_later_edit_is(tmp_path, monkeypatch):
    """config/unmoved.yaml: a maintainer's judgment that one change of a file computes no other number
    takes that change (and only it: by digest, chained) out of the staleness check."""
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    a = "src/repro/a.py"
    old = commit({a: 'HINT = "prepare it at /work/x"\n\ndef f(x):\n    return x + 1\n'})
    digests = provenance.code_digests([root / a])
    second = commit({a: 'HINT = "prepare it again"\n\ndef f(x):\n    return x + 1\n'})
    assert provenance.changed_code(digests, old) == [a]  # HINT's value differs: not provably the same
    (root / "config").mkdir()
    entry = reference.judge(a, old, "the hint's text only")
    assert entry["was"] != entry["now"] and (root / "config" / "unmoved.yaml").exists()
    assert provenance.changed_code(digests, old) == []
    assert provenance.changed_code(digests) == []  # the record's own digest (no commit) is judged too
    commit({a: 'HINT = "prepare it again, by hand"\n\ndef f(x):\n    return x + 1\n'})
    assert provenance.changed_code(digests, old) == [a]  # a later edit counts again ...
    reference.judge(a, second, "the hint's text only")
    assert provenance.changed_code(digests, old) == []  # ... until judged: judgments chain
    commit({a: 'HINT = "prepare it again, by hand"\n\ndef f(x):\n    return x + 2\n'})
    assert provenance.changed_code(digests, old) == [a]
    with pytest.raises(provenance.UnmovedError, match="computes the same"):
        reference.judge(a, "HEAD", "nothing changed")
    with pytest.raises(provenance.UnmovedError, match="git cannot give it"):
        reference.judge(a, "0" * 40, "no such commit")


def test_a_judgment_records_the_digest_the_staleness_check_compares(tmp_path, monkeypatch):
    """judge writes as ``now`` the file's present_digest, what changed_code and status compare: for a
    file that only the layout move changed that is its pre-move text's digest, not its own."""
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    a = "src/repro/a.py"
    old = commit({a: "def f(x):\n    return x + 1\n"})
    commit({a: "def f(x):\n    return x + 2\n"})
    (root / "config").mkdir()
    monkeypatch.setattr(provenance, "present_digest", lambda rel: "0123456789abcdef")
    entry = reference.judge(a, old, "a stand-in for a moved file")
    assert entry["now"] == "0123456789abcdef" != provenance.source_digest(root / a)
    assert provenance.judged_unmoved(a, provenance.digest_at(old, a), provenance.present_digest(a))


def test_a_malformed_judgment_is_refused_by_name(tmp_path, monkeypatch, capsys):
    from repro.pipeline import provenance, reference

    root, _ = _repo(tmp_path, monkeypatch)
    (root / "config").mkdir()
    (root / "config" / "unmoved.yaml").write_text("- file: src/repro/a.py\n  was: abc\n  now: def\n")
    with pytest.raises(provenance.UnmovedError, match="judgment 1 lacks reason"):
        provenance.unmoved_judgments()
    (root / "src" / "repro" / "a.py").write_text("A = 1\n")
    assert reference.main(["judge", "src/repro/a.py", "--since", "HEAD", "--reason", "r"]) == 2
    assert "judgment 1 lacks reason" in capsys.readouterr().err  # named, no traceback


def _published(root, *folders):
    """Reference records under ``root``/results/reference/nvidia-h200/<folder> (the key is the folder's
    first and last parts, as a sweep point's record names its arm): what ``judge --records`` checks
    its keys against."""
    from repro import records

    for folder in folders:
        parts = folder.split("/")
        rec = dict(experiment=parts[-1], paper=parts[0], scale="paper", status="ok", params={}, metrics={},
                   inputs={}, started="2026-12-01T00:00:00+00:00", reason=None, provenance={"commit": "c0ffee"})
        records.write(root / "results" / "reference" / "nvidia-h200" / folder, rec)


def test_a_scoped_judgment_clears_its_records_and_no_other(tmp_path, monkeypatch):
    """A judgment with ``records:`` counts only in those records' staleness checks: another record
    with the same change of the same file stays stale, and so does a check that names no record."""
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    a = "src/repro/a.py"
    old = commit({a: "def lrn(x):\n    return x / 2\n\ndef conv(x):\n    return x + 1\n"})
    digests = provenance.code_digests([root / a])
    commit({a: "def lrn(x):\n    return x * 0.5\n\ndef conv(x):\n    return x + 1\n"})
    (root / "config").mkdir()
    _published(root, "p/vgg", "p/alexnet")
    entry = reference.judge(a, old, "conv only: never reaches lrn", records=["p/vgg"])
    assert entry["records"] == ["p/vgg"]
    assert provenance.changed_code(digests, old, record_names={"p/vgg"}) == []
    assert provenance.changed_code(digests, old, record_names={"p/alexnet"}) == [a]
    assert provenance.changed_code(digests, old) == [a]  # no record named: only unscoped judgments count
    assert provenance.judged_unmoved(a, provenance.digest_at(old, a), provenance.present_digest(a), {"p/vgg"})
    assert not provenance.judged_unmoved(a, provenance.digest_at(old, a), provenance.present_digest(a))


def test_a_file_added_since_is_judged_for_its_records_only(tmp_path, monkeypatch):
    """``was: absent``: a file that did not exist at the record's commit (a module its closure gained),
    judged for the records it cannot move; it counts for them, through changed_since's path and a
    record's own digests alike, and for no other record."""
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    a, b = "src/repro/a.py", "src/repro/b.py"
    old = commit({a: "def f(x):\n    return x + 1\n"})
    commit({b: "class Transformer:\n    pass\n"})
    assert provenance.changed_since(old, [a, b]) == [b]
    assert provenance.digest_at(old, b) is None and provenance.digest_then(old, b) == provenance.ABSENT
    assert provenance.digest_then(old, a) == provenance.digest_at(old, a)
    assert provenance.digest_then("0" * 40, b) is None  # a commit git does not have: cannot tell
    (root / "config").mkdir()
    _published(root, "p/resnet", "p/gpt")
    entry = reference.judge(b, old, "defines a class that p/resnet never builds", records=["p/resnet"])
    assert entry["was"] == "absent" and entry["now"] == provenance.present_digest(b)
    assert provenance.changed_since_judged(old, [a, b], record_names={"p/resnet"}) == []
    assert provenance.changed_since_judged(old, [a, b], record_names={"p/gpt"}) == [b]
    assert provenance.changed_since_judged(old, [a, b]) == [b]
    # a record that lists the file it ran (from a tree where b.py was not committed yet at its commit)
    digests = provenance.code_digests([root / a, root / b])
    commit({b: "class Transformer:\n    depth = 2\n"})
    assert provenance.changed_code(digests, old, record_names={"p/resnet"}) == [b]  # a later edit counts ...
    reference.judge(b, old, "p/resnet builds no Transformer", records=["p/resnet"])
    assert provenance.changed_code(digests, old, record_names={"p/resnet"}) == []  # ... until judged
    assert provenance.changed_code(digests, old, record_names={"p/gpt"}) == [b]


def test_an_unscoped_judgment_of_an_added_file_is_refused(tmp_path, monkeypatch, capsys):
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    (root / "config").mkdir()
    (root / "config" / "unmoved.yaml").write_text(
        "- file: src/repro/b.py\n  was: absent\n  now: 0123456789abcdef\n  since: abc1234\n  reason: new\n")
    with pytest.raises(provenance.UnmovedError, match=r"judgment 1 \(src/repro/b.py since abc1234\).*absent.*records"):
        provenance.unmoved_judgments()
    for bad in ("  records: []\n", "  records: p/x\n", "  records: [p]\n", "  records: [p/../x]\n"):
        (root / "config" / "unmoved.yaml").write_text(
            "- file: src/repro/b.py\n  was: absent\n  now: 0123456789abcdef\n  since: abc1234\n"
            f"  reason: new\n{bad}")
        with pytest.raises(provenance.UnmovedError, match=r"judgment 1 \(src/repro/b.py since abc1234\).*records"):
            provenance.unmoved_judgments()
    (root / "config" / "unmoved.yaml").write_text(
        "- file: src/repro/b.py\n  was: 0123456789abcdef\n  now: absent\n  reason: deleted\n")
    with pytest.raises(provenance.UnmovedError, match="now: absent"):
        provenance.unmoved_judgments()
    # judge refuses to write one
    (root / "config" / "unmoved.yaml").write_text("")
    old = commit({"src/repro/a.py": "A = 1\n"})
    commit({"src/repro/b.py": "B = 2\n"})
    with pytest.raises(provenance.UnmovedError, match="did not exist at .*--records"):
        reference.judge("src/repro/b.py", old, "new")
    assert reference.main(["judge", "src/repro/b.py", "--since", old, "--reason", "new"]) == 2
    assert "--records" in capsys.readouterr().err
    assert (root / "config" / "unmoved.yaml").read_text() == ""


def test_judgments_chain_through_scoped_and_unscoped_edges(tmp_path, monkeypatch):
    """a -> b unscoped, b -> c for one record: the chain a -> c holds for that record only; an added
    file's absent -> b for one record then b -> c unscoped: a -> c for that record only."""
    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    a, b = "src/repro/a.py", "src/repro/b.py"
    (root / "config").mkdir()
    _published(root, "p/x", "p/y")
    v0 = commit({a: "def f(x):\n    return x + 1\n"})
    digests = provenance.code_digests([root / a])
    v1 = commit({a: "def f(x):\n    return x + 1.0\n", b: "B = 1\n"})
    reference.judge(a, v0, "float constant, same results")
    reference.judge(b, v0, "B is read by no code of p/x", records=["p/x"])
    commit({a: "def f(x):\n    return 1.0 + x\n", b: "B = 2\n"})
    reference.judge(a, v1, "operands swapped, p/x only", records=["p/x"])
    reference.judge(b, v1, "B's value is read by nothing")
    assert provenance.changed_code(digests, v0, record_names={"p/x"}) == []
    assert provenance.changed_code(digests, v0, record_names={"p/y"}) == [a]
    assert provenance.changed_since_judged(v0, [a, b], record_names={"p/x"}) == []
    assert provenance.changed_since_judged(v0, [a, b], record_names={"p/y"}) == [a, b]
    assert provenance.changed_since_judged(v1, [a, b], record_names={"p/y"}) == [a]  # b's edge is unscoped


def test_judge_cli_writes_the_records_and_refuses_a_key_no_record_has(tmp_path, monkeypatch, capsys):
    import yaml

    from repro.pipeline import provenance, reference

    root, commit = _repo(tmp_path, monkeypatch)
    b = "src/repro/b.py"
    (root / "config").mkdir()
    _published(root, "p/x", "p/sweep/x_e10")
    old = commit({"src/repro/a.py": "A = 1\n"})
    commit({b: "B = 2\n"})
    assert reference.main(["judge", b, "--since", old, "--reason", "new", "--records", "p/nope"]) == 2
    assert "p/nope" in capsys.readouterr().err
    assert reference.main(["judge", b, "--since", old, "--reason", "new", "--records", "p/x", "p/sweep/x_e10"]) == 0
    assert "absent ->" in capsys.readouterr().out
    [entry] = yaml.safe_load((root / "config" / "unmoved.yaml").read_text())
    assert entry == dict(file=b, was="absent", now=provenance.present_digest(b), since=old[:7],
                         records=["p/x", "p/sweep/x_e10"], reason="new")
    assert provenance.changed_since_judged(old, [b], record_names={"p/x"}) == []


def test_import_closure_parses_each_file_once_and_keeps_the_lists_between_processes(tmp_path, monkeypatch):
    """The code inputs of every rule come from import closures (common.smk): a module shared by many
    entries is parsed once, the parsed import lists persist (keyed by the file's bytes) so that the
    next Snakemake start parses nothing, and an edited file is parsed again and its new imports count."""
    import ast

    from repro.pipeline import provenance

    pkg = tmp_path / "src" / "repro"
    (pkg / "lib").mkdir(parents=True)
    for rel, text in {"__init__.py": "", "lib/__init__.py": "", "lib/core.py": "import numpy\n",
                      "a.py": "from repro.lib import core\n", "b.py": "from .lib.core import x\n",
                      "extra.py": "K = 1\n"}.items():
        (pkg / rel).write_text(text)
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", pkg)
    monkeypatch.setenv("REPRO_CODE_CACHE", str(tmp_path / "cache" / "imports.json"))
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda src, *a, **k: parsed.append(src) or real_parse(src, *a, **k))
    provenance._import_cache.cache_clear()
    want = ["repro", "repro.a", "repro.lib", "repro.lib.core"]
    assert provenance.import_closure("repro.a") == want
    assert provenance.import_closure("repro.b") == ["repro", "repro.b", "repro.lib", "repro.lib.core"]
    assert len(parsed) == 5  # repro, a, lib, lib.core, b: core and the packages once for both
    provenance._import_cache.cache_clear()  # a new process: the lists come from the cache file
    parsed.clear()
    assert provenance.import_closure("repro.a") == want and parsed == []
    (pkg / "lib" / "core.py").write_text("from repro import extra\n")  # edited: parsed again
    assert provenance.import_closure("repro.a") == ["repro", "repro.a", "repro.extra", "repro.lib", "repro.lib.core"]
    assert len(parsed) == 2  # core.py and the new extra.py
    (tmp_path / "cache" / "imports.json").write_text("{not json")  # a broken cache is an empty one
    provenance._import_cache.cache_clear()
    assert provenance.import_closure("repro.a")[-1] == "repro.lib.core"


def test_syntax_work_is_kept_between_processes(tmp_path, monkeypatch):
    """A source's digest, definitions and move-canonical form are parsed once and kept in the syntax
    cache (beside the import cache): a new process parses nothing it has seen; an edited text is
    parsed again; a cache written under another Python or broken is an empty one."""
    import ast
    import json

    from repro.pipeline import provenance

    monkeypatch.setenv("REPRO_CODE_CACHE", str(tmp_path / "cache" / "imports.json"))
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda src, *a, **k: parsed.append(src) or real_parse(src, *a, **k))

    def new_process():
        for fn in (provenance._syntax_cache, provenance.text_digest, provenance._definitions, provenance._former_key):
            fn.cache_clear()
        parsed.clear()

    text, other = "def f(x):\n    return x + 1\n", "def f(x):\n    return x + 2\n"
    new_process()
    first = (provenance.text_digest(text, ".py"), provenance.definitions(text), provenance.same_but_moved(text, text))
    assert parsed and first[2]
    provenance._save_syntax_cache()
    kept = json.loads(provenance.syntax_cache_path().read_text())
    assert kept["python"] == provenance._PYTHON and len(kept["entries"]) == 1

    new_process()
    assert (provenance.text_digest(text, ".py"), provenance.definitions(text), provenance.same_but_moved(text, text)) \
        == first and parsed == []  # all from the cache file
    assert provenance.text_digest(other, ".py") != first[0] and parsed  # a new text is parsed
    assert not provenance.same_but_moved(text, other)

    for broken in (json.dumps({"python": "2.7", "entries": kept["entries"]}), "{not json"):
        provenance.syntax_cache_path().write_text(broken)
        new_process()
        assert provenance.text_digest(text, ".py") == first[0] and parsed  # parsed afresh
    with pytest.raises(SyntaxError):
        provenance.text_digest("def (", ".py")


def test_files_at_commits_through_one_reader_equal_git_show():
    """provenance's `git cat-file --batch` reader gives what `git show <commit>:<path>` gives: the
    text of files at several commits (those of a layout move among them), None for a path the commit
    lacks, git show's listing for a folder; and a forked child reads through its own reader while the
    parent's keeps working, with no warning about the inherited one."""
    import subprocess
    import warnings

    from repro.pipeline.provenance import _BLOBS, LAYOUT_MOVE_BASE, REPO_ROOT, _git

    commits = subprocess.run(["git", "rev-list", "--max-count=3", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout.split() + [LAYOUT_MOVE_BASE, "HEAD"]
    paths = ["README.md", "Snakefile", "src/repro/layout.py", "config/claims/sptrsv.yaml", "no/such/file.py", "config"]
    for commit in commits:
        for rel in paths:
            assert _BLOBS.show(commit, rel) == _git("show", f"{commit}:{rel}"), (commit, rel)
    assert _BLOBS.show("HEAD", "no/such/file.py") is None
    parent_reader = _BLOBS.proc
    pid = os.fork()
    if pid == 0:  # the child: its own reader, no warning about the parent's
        code = 1
        try:
            import gc

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ok = _BLOBS.show("HEAD", "Snakefile") == _git("show", "HEAD:Snakefile") and _BLOBS.proc is not parent_reader
                del parent_reader
                gc.collect()
            code = 0 if ok and not [w for w in caught if issubclass(w.category, ResourceWarning)] else 1
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert _BLOBS.proc is parent_reader and _BLOBS.show("HEAD", "README.md") == _git("show", "HEAD:README.md")
