"""The whole DAG at smoke scale end to end (the session's smoke run, conftest.smoke_run): every record,
figure and claim made, the smoke baseline learns (and the check can fail), a rerun is a no-op and one
figure by name reruns only its chain. Apart from tests/test_workflow.py (dry runs, lint, the data
check), so that only the tests that read the smoke run share its pytest-xdist worker (conftest's
SmokeDagFirst puts every file that uses it into one unit of work)."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, snakemake as _snakemake

from repro import layout

# The smoke scale must show learning, or a broken trainer passes the smoke DAG (issue 19, item 9): the
# check (repro.report.learning) is the one the claims report's card for a smoke run states.
from repro.report.learning import problems as learning_problems

EXPERIMENTS = layout.experiment_names()


@pytest.mark.slow
def test_smoke_dag_end_to_end(smoke_run):
    work, proc, _ = smoke_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = (work / "results" / "claims" / "report.html").read_text()
    from repro.report.claims import load_ledger

    for claim in load_ledger(REPO / "config" / "claims"):
        assert claim["id"] in report
    for exp in EXPERIMENTS:
        assert (work / "results" / exp / "record.json").exists()
        if layout.experiment_file(exp).get("figure"):
            assert (work / "results" / layout.figure_path(exp, "results").split("results/", 1)[1]).exists()
    assert (work / "results" / "mlflow.db").exists()


@pytest.mark.slow
def test_smoke_baseline_learns(smoke_run):
    work, proc, _ = smoke_run
    assert proc.returncode == 0
    assert learning_problems(work / "results" / "baseline" / "resnet32") == []


@pytest.mark.slow
def test_the_learning_check_fails_for_a_broken_trainer(smoke_run, tmp_path):
    """The check above can fail: the same smoke run with the learning rate at 0 (a trainer that never
    steps) on the DAG's prepared data, for one epoch of its three: with nothing learnt the weights are
    those of every later epoch (only BatchNorm's running statistics move, settled within the epoch's
    40 steps), so the check sees what it would after three (top-1 11.5% and 11.3%, test loss 2.56 and
    2.57), at a third of the cost."""
    work, proc, _ = smoke_run
    assert proc.returncode == 0
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    subprocess.run([sys.executable, "-m", "repro.pipeline.run", "experiment=baseline/resnet32", "scale=smoke",
                    "experiment.params.lr=0", "experiment.params.epochs=1", f"out={tmp_path / 'lr0'}"], cwd=work,
                   env=env, check=True, capture_output=True)
    problems = learning_problems(tmp_path / "lr0")
    assert any("top-1" in p for p in problems) and any("test loss" in p for p in problems), problems


@pytest.mark.slow
def test_smoke_rerun_is_a_no_op(smoke_run):
    work, proc, shards = smoke_run
    assert proc.returncode == 0
    again = _snakemake("--cores", "2", "--config", "scale=smoke", f"cifar10_source=shards:{shards}", cwd=work)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_one_figure_by_name_reruns_only_its_chain(smoke_run):
    work, proc, shards = smoke_run
    assert proc.returncode == 0
    (work / "results" / "figures" / "ceilings" / "ceilings.png").unlink()
    again = _snakemake("results/figures/ceilings/ceilings.png", "--cores", "2", "--config", "scale=smoke",
                       f"cifar10_source=shards:{shards}", cwd=work)
    assert (work / "results" / "figures" / "ceilings" / "ceilings.png").exists()
    assert "baseline" not in again.stderr.split("Job stats:")[-1].split("Select jobs")[0]
