"""repro.pipeline.dagcache: what the workflow computes from config/ and src/repro/ is kept between
Snakemake starts exactly while those files stay as they were."""

import json
import os
import re

from conftest import copy_repository, snakemake

from repro.pipeline import dagcache


def _trees(tmp_path):
    config, src = tmp_path / "config", tmp_path / "src"
    (config / "experiment" / "p").mkdir(parents=True)
    (src / "pkg").mkdir(parents=True)
    (config / "experiment" / "p" / "a.yaml").write_text("name: a\n")
    (src / "pkg" / "m.py").write_text("x = 1\n")
    return config, src


def test_the_stamp_changes_with_any_file_of_the_trees(tmp_path):
    config, src = _trees(tmp_path)
    stamp = dagcache.tree_stamp((config, src))
    assert dagcache.tree_stamp((config, src)) == stamp  # nothing changed
    (src / "pkg" / "__pycache__").mkdir()
    (src / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    (src / "pkg" / "notes.txt").write_text("not a source\n")
    assert dagcache.tree_stamp((config, src)) == stamp  # byte code and other files are not sources
    changes = [lambda: (config / "experiment" / "p" / "a.yaml").write_text("name: b\n"),  # same size, later mtime
               lambda: os.utime(src / "pkg" / "m.py", ns=(1, 1)),  # the time alone
               lambda: (src / "pkg" / "n.py").write_text(""),  # a new module
               lambda: (config / "experiment" / "p" / "a.yaml").unlink()]  # a removed file
    seen = {stamp}
    for change in changes:
        change()
        stamp = dagcache.tree_stamp((config, src))
        assert stamp not in seen
        seen.add(stamp)


def test_the_rule_files_and_the_snakefile_count(tmp_path):
    """The rules' output patterns (a kernel's status file) are part of what is cached: an edit of a
    rule file or of the Snakefile changes the stamp; another file beside the Snakefile does not."""
    config, src = _trees(tmp_path)
    (tmp_path / "workflow" / "rules").mkdir(parents=True)
    (tmp_path / "workflow" / "rules" / "build.smk").write_text("rule build_kernel:\n")
    (tmp_path / "Snakefile").write_text("include: 'workflow/rules/build.smk'\n")
    roots = (config, src, tmp_path / "workflow", tmp_path)
    stamp = dagcache.tree_stamp(roots)
    (tmp_path / "README.md").write_text("not read by the rules\n")
    assert dagcache.tree_stamp(roots) == stamp
    (tmp_path / "workflow" / "rules" / "build.smk").write_text("rule build_kernels:\n")
    assert dagcache.tree_stamp(roots) != stamp
    stamp = dagcache.tree_stamp(roots)
    (tmp_path / "Snakefile").write_text("include: 'workflow/rules/build.smk'  \n")
    assert dagcache.tree_stamp(roots) != stamp


def test_values_are_computed_once_per_stamp(tmp_path):
    path, calls = tmp_path / "dag.json", []

    def compute():
        calls.append(1)
        return {"code": ("a.py", "b.py"), "n": None}

    first = dagcache.DagCache(path, stamp="s1", save_at_exit=False)
    assert first.get("k", compute) == {"code": ["a.py", "b.py"], "n": None}  # as JSON gives it back
    first.save()
    again = dagcache.DagCache(path, stamp="s1", save_at_exit=False)
    assert again.get("k", compute) == {"code": ["a.py", "b.py"], "n": None} and len(calls) == 1
    other = dagcache.DagCache(path, stamp="s2", save_at_exit=False)  # the trees changed
    other.get("k", compute)
    assert len(calls) == 2
    path.write_text("{not json")
    assert dagcache.DagCache(path, stamp="s2", save_at_exit=False).entries == {}  # a broken cache is an empty one


def test_the_dag_follows_edits_through_the_cache(tmp_path):
    """A dry run keeps its inputs in the copy's .cache/dag.json (written as Snakemake exits); an
    experiment file's new input and a new import in its entry's module reach the next dry run's step."""
    work = copy_repository(tmp_path / "work", caches=False)  # the dry run must write the cache itself

    def inputs():
        out = snakemake("-n", "--forceall", "results/ceilings/ceilings/record.json", "--config", "scale=smoke",
                        cwd=work).stdout
        block = out[out.index("rule experiment:"):]
        return set(re.search(r"^\s*input: (.*)$", block, re.M).group(1).split(", "))

    before = inputs()
    cache = json.loads((work / ".cache" / "dag.json").read_text())
    assert before == {f for v in cache["entries"]["inputs/smoke/ceilings/ceilings"].values() if v
                      for f in ([v] if isinstance(v, str) else v)}
    assert inputs() == before  # from the cache
    exp = work / "config" / "experiment" / "ceilings" / "ceilings.yaml"
    exp.write_text(exp.read_text() + "inputs:\n  extra: data/cifar10/manifest.json\n")
    entry = work / "src" / "repro" / "papers" / "ceilings" / "experiment.py"
    entry.write_text(entry.read_text() + "\nimport repro.data.arrays  # noqa\n")
    assert {"results/data/cifar10/manifest.json", "src/repro/data/arrays.py"} <= inputs() - before
