"""A paper is its own set of files: a throwaway paper added to a temporary copy of the repository (its
package, experiment file and claims file, nothing else edited; it needs no rule file) is run by the
DAG, drawn, judged in the claims report, counted in the ledger and held to the import contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_repository

FILES = {
    "src/repro/papers/toy/__init__.py": '"""A throwaway paper for tests/test_new_paper.py."""\n',
    "src/repro/papers/toy/experiment.py": '''"""The toy paper's one experiment: a number the claim reads."""
from dataclasses import dataclass

import pandas as pd

from repro.experiment import Context, Result, experiment


@dataclass
class ToyParams:
    speedup: float = 2.0  # what the run reports


@experiment(params=ToyParams)
def toy_bench(p: ToyParams, ctx: Context) -> Result:
    return Result(metrics={"speedup": p.speedup}, tables={"points": pd.DataFrame({"x": [1, 2], "y": [p.speedup, 1]})})
''',
    "src/repro/papers/toy/figures.py": '''"""The toy paper's figure."""
import pandas as pd
from matplotlib.figure import Figure

from repro.figures import finish, open_run


def toy_bench(run_dir):
    run_dir, record = open_run(run_dir)
    fig = Figure(figsize=(3, 2))
    ax = fig.subplots()
    points = pd.read_csv(run_dir / "points.csv")
    ax.plot(points.x, points.y)
    return finish(fig, "toy", record)
''',
    "config/experiment/toy/toy_bench.yaml": '''# @package experiment
name: toy_bench
paper: toy
entry: repro.papers.toy.experiment:toy_bench
figure: repro.papers.toy.figures:toy_bench
gpus: 0
params:
  speedup: 2.5
smoke:
  speedup: 1.5
''',
    "config/claims/toy.yaml": '''claims:
  - id: toy.speedup
    paper: Toy
    statement: a toy speedup
    paper_value: 2.0
    unit: x
    target: 2.0
    direction: ">="
    kind: model
    metric: {experiment: toy/toy_bench, key: speedup}
''',
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    work = copy_repository(tmp_path_factory.mktemp("newpaper"))
    for rel, text in FILES.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    return work


def run(work: Path, *args) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(work / "src"), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def test_the_dag_runs_and_draws_it_and_the_report_judges_it(repo):
    dry = run(repo, sys.executable, "-m", "snakemake", "-n", "--config", "scale=smoke")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "output: results/toy/toy_bench/record.json" in dry.stdout  # through the spine's experiment rule
    made = run(repo, sys.executable, "-m", "snakemake", "toy", "--cores", "1", "--config", "scale=paper")
    assert made.returncode == 0, made.stderr[-3000:]  # the paper's slice: its record and its figure
    assert (repo / "results" / "toy" / "toy_bench" / "record.json").is_file()
    assert (repo / "results" / "figures" / "toy" / "toy_bench.png").is_file()
    report = run(repo, sys.executable, "-m", "repro.report", "--results", "results", "--out", "results/claims",
                 "--reference", "results/reference", "--figures", "results/figures/toy/toy_bench.png")
    assert report.returncode == 0, report.stderr[-3000:]
    rows = (repo / "results" / "claims" / "claims.csv").read_text()
    row = next(line for line in rows.splitlines() if line.startswith("toy.speedup,"))
    assert ",2.5,x,model,this-run," in row and ",cpu," in row


def test_the_ledger_and_the_import_contract_see_it(repo):
    ids = run(repo, sys.executable, "-c", "from repro import layout; from repro.report import claims; "
              "print(layout.papers()); print([c['id'] for c in claims.load_ledger('config/claims')])")
    assert "'toy'" in ids.stdout.splitlines()[0] and "'toy.speedup'" in ids.stdout.splitlines()[1]
    lint = run(repo, str(Path(sys.executable).parent / "lint-imports"), "--no-cache")
    assert lint.returncode == 0 and "0 broken" in lint.stdout
    bad = repo / "src" / "repro" / "papers" / "toy" / "experiment.py"
    bad.write_text(bad.read_text() + "\nfrom repro.papers.tsm2x import tsm2  # noqa\n")
    lint = run(repo, str(Path(sys.executable).parent / "lint-imports"), "--no-cache")
    assert lint.returncode != 0 and "- repro.papers.toy.experiment -> repro.papers.tsm2x.tsm2" in lint.stdout
