"""The Snakemake DAG: job counts per scale (API dry run), lint, the data check, and the smoke DAG
end to end."""

import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_repository, dag_jobs, snakemake as _snakemake, write_mini_shards

from repro import layout, sweep

EXPERIMENTS = layout.experiment_names()


def job_counts(workdir: Path, config: dict) -> collections.Counter:
    """Jobs per rule of a forced dry run."""
    return collections.Counter(job.rule.name for job in dag_jobs(workdir, config))


# runs of the ClickTrain budget sweep beyond the arms' configured runs: 5 arms x budgets (10, 20, 40,
# 80) at paper scale, the 40-epoch points being the configured runs; (3, 4) at smoke, where only
# ClickTrain's smoke run (3 epochs) is a configured run
BUDGET_POINTS = {"paper": 5 * 3, "smoke": 5 * 2 - 1}
# repeats of the sweep with other seeds: every arm at 40 epochs with seeds 1 and 2 (paper), at 4 with seed 1 (smoke)
BUDGET_REPEATS = {"paper": 5 * 2, "smoke": 5}
# runs of the COMET error-bound sweep beyond the arms' configured runs: adaptive (4 values) and fixed
# (4) at paper scale, two per arm at smoke; one value per arm is the arm's configured run
EB_SWEEP_POINTS = {"paper": 4 + 4 - 2, "smoke": 2 + 2 - 2}
# runs of ClickTrain's wide comparison beyond the four wide arms' configured runs: seeds 1 and 2 of
# three arms and 4 + 3 curve points (paper); one curve point per curve (smoke, one seed)
WIDE_POINTS = {"paper": 3 * 2 + 4 + 3, "smoke": 2}


def expected_counts(scale: str) -> dict:
    """One job per experiment file (under the spine's experiment rule; ClickTrain's arms under their
    own), one per sweep point that is not a configured run, one build per kernel source, one figure
    per experiment that names one, and the spine's steps."""
    arms = 12  # ClickTrain's arms on three networks: rule clicktrain_arm (they also write pruned.pt)
    return {"all": 1, "claims": 1, "mlflow": 1, "cifar10": 1, "cifar10_source": 1, "cifar10_source_record": 1,
            "cifar10_check": 1,
            "build_kernel": len(layout.kernel_sources()),
            "figure": sum(bool(layout.experiment_file(e).get("figure")) for e in EXPERIMENTS),
            "experiment": len(EXPERIMENTS) - arms, "clicktrain_arm": arms,
            "sweep_point": BUDGET_POINTS[scale] + BUDGET_REPEATS[scale] + EB_SWEEP_POINTS[scale] + WIDE_POINTS[scale]}


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_dry_run_job_counts(scale):
    counts = job_counts(REPO, {"scale": scale})
    assert dict(counts) == expected_counts(scale)


def test_every_experiment_has_a_rule():
    jobs = dag_jobs(REPO, {"scale": "smoke"})
    ran = {str(f).removeprefix("results/").removesuffix("/record.json") for j in jobs for f in j.output
           if str(f).endswith("record.json")}
    assert set(EXPERIMENTS) <= ran
    (ingest,) = [j for j in jobs if j.rule.name == "mlflow"]  # and without mlflow_credentials, no login
    assert "--credentials" not in ingest.shellcmd


def test_the_mlflow_rule_logs_in_with_the_configured_credentials_file():
    """`mlflow_credentials` (a team server's login, tools/mlflow_server.sh) reaches the ingestion as
    --credentials FILE: the file's path, never the password, on the command line."""
    path = "results/mlflow-server/my credentials"
    jobs = dag_jobs(REPO, {"scale": "smoke", "mlflow_credentials": path}, ["mlflow"])
    (ingest,) = [j for j in jobs if j.rule.name == "mlflow"]
    assert f"--credentials '{path}' " in ingest.shellcmd
    assert "results/mlflow-server/my credentials" not in [str(f) for f in ingest.input]  # a secret, not an input


def test_a_paper_without_a_rule_file_runs_through_the_spines_rule():
    """Only a paper with steps of its own has a rule file: every experiment of the others is a job of
    the spine's experiment rule; ClickTrain's file takes its arms and leaves the rest to that rule."""
    rule_files = {p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")}
    without = [p for p in layout.papers() if p not in rule_files]
    assert {"tsm2x", "superneurons", "comet"} <= set(without) and "clicktrain" not in without
    made_by = {str(f): j.rule.name for j in dag_jobs(REPO, {"scale": "smoke"}) for f in j.output}

    def rules_of(paper):
        return {made_by[layout.record_path(e)] for e in EXPERIMENTS if layout.split(e)[0] == paper}

    for paper in without:
        assert rules_of(paper) == {"experiment"}, paper
    assert rules_of("clicktrain") == {"experiment", "clicktrain_arm"}


def slice_of(paper: str, scale: str) -> set[str]:
    """The experiments `snakemake <paper>` runs: the paper's, and those whose records they read
    (declared inputs), their sweeps' points' and theirs in turn."""
    found, todo = set(), [e for e in EXPERIMENTS if layout.split(e)[0] == paper]
    while todo:
        if (exp := todo.pop()) in found:
            continue
        found.add(exp)
        todo += [path.removesuffix("/record.json") for path in layout.inputs(exp).values()
                 if path.removesuffix("/record.json") in EXPERIMENTS]
        if sweep.is_sweep(exp):
            todo += [point.experiment for point in sweep.points(exp, scale)]
    return found


@pytest.mark.parametrize("paper", ["tsm2x", "baseline", "clicktrain"])
def test_a_papers_target_plans_its_slice(paper):
    """`snakemake <paper>`: every experiment and figure of the paper, and of the rest only what they
    read (another paper's record, the data, cubins); no other figure, no report."""
    jobs = dag_jobs(REPO, {"scale": "smoke"}, targets=[paper])
    outputs = {str(f) for j in jobs for f in j.output}
    ran = {e for e in EXPERIMENTS if layout.record_path(e) in outputs}
    assert ran == slice_of(paper, "smoke") and {e for e in EXPERIMENTS if layout.split(e)[0] == paper} <= ran
    figures = {f for f in outputs if f.startswith("results/figures/") and f.endswith(".png")}
    assert figures == {layout.figure_path(e) for e in EXPERIMENTS
                       if layout.split(e)[0] == paper and layout.experiment_file(e).get("figure")}
    points = {str(f) for j in jobs if j.rule.name == "sweep_point" for f in j.output}
    assert all(f.startswith(f"results/{paper}/") for f in points)
    kernels = {stem for e in ran for stem in layout.kernels(e)}
    assert {j.wildcards["stem"] for j in jobs if j.rule.name == "build_kernel"} == kernels
    data = any("data/cifar10/train.npz" in layout.inputs(e).values() for e in ran)
    assert ({j.rule.name for j in jobs} - {paper, "experiment", "clicktrain_arm", "sweep_point", "figure", "build_kernel"}
            == ({"cifar10_source", "cifar10_source_record", "cifar10_check", "cifar10"} if data else set()))


def test_a_paper_named_as_a_rule_is_refused(tmp_path):
    """A paper's target is named for it: a rule of the same name (the stub rule files had one) fails
    at start, naming both."""
    for name in ("Snakefile", "workflow", "config"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, tmp_path / name)
    (tmp_path / "workflow" / "rules" / "tsm2x.smk").write_text("use rule experiment as tsm2x with:\n"
                                                             "    wildcard_constraints:\n"
                                                             "        experiment=\"tsm2x/tsm2_r\",\n")
    with pytest.raises(Exception, match="rule 'tsm2x' has the name of the paper 'tsm2x'"):
        dag_jobs(tmp_path, {"scale": "smoke"})


def test_a_step_reruns_when_the_code_it_runs_changes():
    """Each experiment step's code inputs are what its run imports (its record's provenance.code):
    the shared trainer, models and data modules too; not the figure modules, nor another step's
    collection code."""
    jobs = {(j.rule.name, tuple(sorted(j.wildcards.items()))): {str(f) for f in j.input}
            for j in dag_jobs(REPO, {"scale": "smoke"})}
    baseline = jobs[("experiment", (("experiment", "baseline/resnet32"),))]
    assert {"src/repro/models/resnet.py", "src/repro/train/trainer.py", "src/repro/data/arrays.py",
            "src/repro/papers/baseline/experiment.py"} <= baseline
    assert not any(f.endswith("figures.py") for f in baseline)
    admm_point = next(inputs for (rule, wc), inputs in jobs.items()
                      if rule == "sweep_point" and dict(wc)["point"].startswith("admm_e"))
    assert "src/repro/papers/clicktrain/masks.py" in admm_point and "src/repro/papers/clicktrain/budget.py" not in admm_point
    comet = jobs[("experiment", (("experiment", "comet/comet_fixed_eb"),))]
    assert {"src/repro/papers/comet/kernels/comet_codec.cu", "results/build/kernels/comet_codec.json",
            "config/experiment/comet/comet_fixed_eb.yaml", "config/experiment/comet/comet_uncompressed.yaml"} <= comet
    assert "src/repro/papers/comet/eb_sweep.py" not in comet
    assert not any("tsm2" in f for f in comet)  # a TSM2X kernel edit reruns no COMET step


def test_an_experiment_reads_what_its_file_declares():
    """Declared inputs become the step's inputs; a sweep's step reads every point's record (the
    configured run's where a point is that run)."""
    jobs = {(j.rule.name, tuple(sorted(j.wildcards.items()))): {str(f) for f in j.input}
            for j in dag_jobs(REPO, {"scale": "paper"})}
    tsm2 = jobs[("experiment", (("experiment", "tsm2x/tsm2_r"),))]
    assert {"results/ceilings/ceilings/record.json", "results/build/kernels/tsm2r.json"} <= tsm2
    assert "results/build/kernels/tsm2l.json" not in tsm2
    budget = jobs[("experiment", (("experiment", "clicktrain/clicktrain_budget"),))]
    assert {"results/clicktrain/admm/record.json", "results/clicktrain/clicktrain_budget/admm_e10/record.json",
            "results/clicktrain/clicktrain_budget/dense_e40_s1/record.json",
            "results/baseline/resnet32/record.json"} <= budget


def test_superneurons_records_feed_the_report():
    """The experiment rule builds every experiment file of the paper (the four of the paper's
    results and the comparisons with today's alternatives); the claims report and the MLflow step take
    their records (and every figure) as inputs."""
    from repro import layout

    names = sorted(layout.experiments_of("superneurons"))
    assert {"depth", "max_batch", "peak_memory", "throughput", "vs_today_vit"} <= set(names)
    jobs = dag_jobs(REPO, {"scale": "smoke"})
    assert sorted(layout.split(j.wildcards["experiment"])[1] for j in jobs
                  if j.rule.name == "experiment" and j.wildcards["experiment"].startswith("superneurons/")) == names
    for rule in ("claims", "mlflow"):
        inputs = {str(f) for j in jobs if j.rule.name == rule for f in j.input}
        assert {f"results/superneurons/{e}/record.json" for e in names} <= inputs
    claims_inputs = {str(f) for j in jobs if j.rule.name == "claims" for f in j.input}
    assert "results/figures/superneurons/max_batch.png" in claims_inputs


def test_lint():
    proc = _snakemake("--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_config_value_fails_at_start():
    proc = _snakemake("-n", "--config", "scale=huge", check=False)
    assert proc.returncode != 0 and "scale" in proc.stderr + proc.stdout


def snakemake_in(work: Path, *args) -> subprocess.CompletedProcess:
    """``snakemake ARGS`` in a copy, its jobs running the copy's code."""
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(work / "src"), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)


def planned(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Jobs per rule in a run's job stats ({} when there is nothing to be done)."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    if "Job stats:" not in out:
        assert "Nothing to be done" in out, out[-3000:]
        return {}
    table = out.split("Job stats:", 1)[1].split("\ntotal", 1)[0]
    return {cols[0]: int(cols[1]) for line in table.splitlines()
            if len(cols := line.split()) == 2 and cols[1].isdigit()}


def files_under(root: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_damaged_split_reruns_the_data_step_and_a_dry_run_changes_nothing(tmp_path):
    """The prepared splits are checked against their manifest while the DAG is built, reading only
    (data.smk): a dry run and a lint leave a damaged folder as it is and say what is damaged; a real
    run reruns the cifar10 step."""
    from repro.prepared import broken_splits

    work = copy_repository(tmp_path / "work")
    shards = write_mini_shards(tmp_path / "shards")
    args = ("results/data/cifar10/manifest.json", "--cores", "1", "--config", "scale=smoke",
            f"cifar10_source=shards:{shards}")
    assert planned(snakemake_in(work, *args)) == {"cifar10_check": 1, "cifar10_source": 1, "cifar10_source_record": 1,
                                                  "cifar10": 1}
    assert planned(snakemake_in(work, "-n", *args)) == {}
    split = work / "results" / "data" / "cifar10" / "train.npz"
    split.write_bytes(split.read_bytes()[: split.stat().st_size // 2])
    before = files_under(work / "results")
    dry = snakemake_in(work, "-n", *args)
    assert planned(dry) == {"cifar10_check": 1, "cifar10": 1}
    assert "results/data/cifar10 is damaged" in dry.stderr and "train.npz has" in dry.stderr
    lint = snakemake_in(work, "--lint")
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-3000:]
    assert files_under(work / "results") == before  # the damaged split and its manifest as they were
    assert planned(snakemake_in(work, *args)) == {"cifar10_check": 1, "cifar10": 1}
    assert broken_splits(work / "results" / "data" / "cifar10") == []
    # the stamp's job reruns once to record that the damage is gone; the data step does not
    assert planned(snakemake_in(work, *args)) == {"cifar10_check": 1}
    assert planned(snakemake_in(work, "-n", *args)) == {}



@pytest.mark.slow
def test_a_failed_source_check_keeps_the_source_record_and_the_data(tmp_path):
    """A corrupt source fails its check with the file named, and leaves the source record and the
    prepared splits as they were (data.smk): pointing the source back plans nothing, so no training
    job reruns; the corrupt source fails its check again at every run, before the data step."""
    work = copy_repository(tmp_path / "work")
    shards = write_mini_shards(tmp_path / "shards", per_class=7)  # 70 training images: one smoke batch of 64
    bad = tmp_path / "bad"
    shutil.copytree(shards, bad)
    with open(bad / "test.tar.xz", "r+b") as fh:  # one flipped byte
        fh.seek(10)
        byte = fh.read(1)[0]
        fh.seek(10)
        fh.write(bytes([byte ^ 0xFF]))
    training = "results/baseline/vgg16/record.json"

    def run(source, *extra):
        return snakemake_in(work, training, "--cores", "1", *extra, "--config", "scale=smoke",
                            f"cifar10_source=shards:{source}")

    assert planned(run(shards)) == {"cifar10_source": 1, "cifar10_source_record": 1, "cifar10_check": 1,
                                    "cifar10": 1, "experiment": 1}
    data = work / "results" / "data"
    before = files_under(data)
    assert (data / "cifar10-source.json").is_file()
    for _ in range(2):  # the failed check leaves nothing that would let the corrupt source pass the next run
        failed = run(bad)
        out = failed.stdout + failed.stderr
        assert failed.returncode != 0 and "Error in rule cifar10_source" in out, out[-3000:]
        assert "checksum mismatch for" in out and "test.tar.xz" in out and "copy it again" in out
        assert "Error in rule cifar10:" not in out
        assert files_under(data) == before  # the source record and the splits, byte and time
    assert planned(run(shards, "-n")) == {}
    assert planned(run(shards)) == {}
    assert files_under(data) == before
    # a tree from before the per-source stamps has the record and no stamp: while the splits came from
    # the configured source the record is taken as it is (ancient), so nothing reruns
    shutil.rmtree(data / "cifar10-source")
    assert planned(run(shards)) == {}
    # a new good source reruns the data step, and its training, once
    other = tmp_path / "other"
    shutil.copytree(shards, other)
    assert planned(run(other)) == {"cifar10_source": 1, "cifar10_source_record": 1, "cifar10": 1, "experiment": 1}
    assert planned(run(other, "-n")) == {}
