"""repro.layout: where papers and experiments are, and experiment files as Hydra composes them."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from repro import layout

from conftest import REPO


@pytest.mark.parametrize("experiment", layout.experiment_names())
def test_an_experiment_file_reads_as_hydra_composes_it(compose, experiment):
    """The workflow and the stale-code check read experiment files without Hydra; a variant's base must
    merge under it exactly as Hydra's defaults list does."""
    composed = OmegaConf.to_container(compose([f"experiment={experiment}"]).experiment)
    assert composed == layout.experiment_file(experiment)


# The spine's rule files; any other rule file is a paper's (optional: only a paper with steps of its
# own has one).
SPINE_RULE_FILES = {"common", "experiment", "build", "data", "report"}


def test_papers_are_the_packages_that_are_not_shared_libraries():
    papers = layout.papers()
    assert {"baseline", "ceilings", "clicktrain", "comet", "superneurons", "tsm2x"} <= set(papers)
    assert not set(papers) & set(layout.SHARED)
    for paper in papers:  # each owns its files
        assert (REPO / "config" / "experiment" / paper).is_dir(), paper
        assert (REPO / "config" / "claims" / f"{paper}.yaml").is_file(), paper
    rule_files = {p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")}
    assert SPINE_RULE_FILES <= rule_files and rule_files - SPINE_RULE_FILES <= set(papers)


def test_a_variant_lists_its_base_files():
    files = layout.experiment_files("comet/vgg16_comet_fixed_eb")
    assert [f.stem for f in files] == ["vgg16_comet_fixed_eb", "vgg16_comet_uncompressed", "comet_uncompressed"]
    assert layout.experiment_file("comet/vgg16_comet_fixed_eb")["params"]["method"] == "fixed"


def _write(root, rel, text):
    path = root / "experiment" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("text,needle", [
    ("defaults:\n  - base\n  - _self_\nname: v\npaper: p\n", r"defaults must be \[/experiment/p/<base experiment>"),
    ("defaults:\n  - /experiment/p/nope\n  - _self_\nname: v\npaper: p\n", "nope.yaml does not exist"),
    ("defaults:\n  - /experiment/q/base\n  - _self_\nname: v\npaper: p\n", "defaults must be"),
    ("name: v\npaper: p\ngpus: 1\ncolour: red\n", r"unknown key\(s\) \['colour'\]"),
    ("name: v\npaper: p\ngpus: two\n", "gpus must be a whole number"),
    ("name: w\npaper: p\ngpus: 1\n", "name and paper must be 'v' and 'p'"),
])
def test_bad_experiment_files_are_named(tmp_path, text, needle):
    _write(tmp_path, "p/base.yaml", "name: base\npaper: p\ngpus: 1\n")
    _write(tmp_path, "p/v.yaml", text)
    with pytest.raises(layout.LayoutError, match=needle):
        layout.experiment_file("p/v", tmp_path)


ABSTRACT = "# @package experiment\npaper: p\nentry: m:f\ngpus: 1\nparams: {a: 1, b: {c: 2, d: 3}}\nsmoke: {a: 0}\n"
VARIANT = "# @package experiment\ndefaults: [/experiment/p/_base, _self_]\nname: v\nparams: {b: {d: 4}}\n"


def test_an_abstract_base_is_built_on_but_is_no_experiment(tmp_path):
    """A base named _<name> holds what its variants share: it is merged under them, but it is not
    listed (so no workflow target) and reading it as an experiment is refused, naming it abstract."""
    _write(tmp_path, "p/_base.yaml", ABSTRACT)
    _write(tmp_path, "p/v.yaml", VARIANT)
    assert layout.experiment_names(tmp_path) == ["p/v"] and layout.experiments_of("p", tmp_path) == ["v"]
    assert layout.is_abstract("p/_base") and not layout.is_abstract("p/v")
    assert [f.name for f in layout.experiment_files("p/v", tmp_path)] == ["v.yaml", "_base.yaml"]
    assert layout.experiment_file("p/v", tmp_path) == {
        "paper": "p", "entry": "m:f", "gpus": 1, "name": "v", "params": {"a": 1, "b": {"c": 2, "d": 4}}, "smoke": {"a": 0}}
    with pytest.raises(layout.LayoutError, match=r"_base\.yaml: p/_base is an abstract base"):
        layout.experiment_file("p/_base", tmp_path)


def test_hydra_composes_a_variant_of_an_abstract_base_as_layout_merges_it(tmp_path):
    from hydra import compose, initialize_config_dir

    (tmp_path / "run.yaml").write_text((REPO / "config" / "run.yaml").read_text())
    _write(tmp_path, "p/_base.yaml", ABSTRACT)
    _write(tmp_path, "p/v.yaml", VARIANT)
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        composed = compose(config_name="run", overrides=["experiment=p/v"]).experiment
    assert OmegaConf.to_container(composed) == layout.experiment_file("p/v", tmp_path)


def test_the_runner_refuses_an_abstract_base(tmp_path, monkeypatch, capsys, compose):
    """`python -m repro.pipeline.run experiment=<paper>/_<base>` fails before anything runs, saying the
    file is an abstract base and naming the experiments; so does a run that reaches plan() (Hydra's
    own flags skip the precheck)."""
    from repro.pipeline import run

    assert run.precheck(["experiment=superneurons/_vs_today", "scale=smoke"]) == 2
    err = capsys.readouterr().err
    assert "experiment=superneurons/_vs_today: an abstract base" in err and "superneurons/vs_today_vit" in err
    overrides = ["experiment=superneurons/_vs_today", "scale=smoke"]
    with pytest.raises(run.ConfigError, match="an abstract base"):
        run.plan(compose(overrides), overrides)


def test_every_abstract_base_is_built_on():
    """An abstract base no experiment names in its defaults would be dead config."""
    config = REPO / "config" / "experiment"
    used = {f for e in layout.experiment_names() for f in layout.experiment_files(e)[1:]}
    assert {p for p in config.glob("*/_*.yaml")} <= used


def test_kernel_stems_are_unique(tmp_path):
    for paper in ("a", "b"):
        (tmp_path / paper / "kernels").mkdir(parents=True)
        (tmp_path / paper / "kernels" / "k.cu").write_text("")
    with pytest.raises(layout.LayoutError, match="share the stem 'k'"):
        layout.kernel_sources(tmp_path)


def test_experiment_files_are_read_once_per_version(tmp_path, monkeypatch):
    """Snakemake reads every experiment file at each start: each version of a file is parsed once
    (through libyaml where PyYAML has it), an edit is seen, and a caller changing what it got
    changes no later answer."""
    import os

    import yaml

    from repro import layout

    if yaml.__with_libyaml__:
        assert layout._YAML_LOADER is yaml.CSafeLoader
    path = tmp_path / "e.yaml"
    path.write_text("name: e\nparams: {n: 1}\n")
    loads = []
    real = layout.load_yaml
    monkeypatch.setattr(layout, "load_yaml", lambda text: loads.append(text) or real(text))
    first = layout._read(path)
    first["params"]["n"] = 99  # the caller's copy
    assert layout._read(path) == {"name": "e", "params": {"n": 1}} and len(loads) == 1
    path.write_text("name: e\nparams: {n: 22}\n")
    os.utime(path, ns=(1, 1))  # a new version even where the clock does not move
    assert layout._read(path)["params"] == {"n": 22} and len(loads) == 2


def _content_lines(path) -> list[str]:
    """An experiment file's lines as written, its comment and blank lines aside."""
    return [line.rstrip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_no_two_experiment_files_of_a_paper_share_more_than_half_their_lines():
    """Configs state only the difference: a variant names its base in `defaults:` and holds what differs,
    and what several files share where none is a natural base for the others is an abstract base. Two
    files of a paper whose common lines are more than half of the shorter one's are a copy to fold over
    a base. Files of different papers are not compared: a base is always of the same paper."""
    from collections import Counter
    from itertools import combinations

    config = REPO / "config" / "experiment"
    copies = []
    for folder in sorted(p for p in config.iterdir() if p.is_dir()):
        lines = {p: Counter(_content_lines(p)) for p in sorted(folder.glob("*.yaml"))}
        for a, b in combinations(lines, 2):
            shared, shorter = sum((lines[a] & lines[b]).values()), min(lines[a].total(), lines[b].total())
            if shared > shorter / 2:
                copies.append(f"{a.relative_to(config)} and {b.relative_to(config)} ({shared} of {shorter} lines)")
    assert not copies, "experiment files that share more than half their lines: " + "; ".join(copies)
