"""The smoke scale's learning check: the baseline ResNet-32's smoke run must learn, or a broken trainer
passes the smoke DAG (issue 19, item 9). That run (2,560 images, 3 epochs, 1,000 test images) reaches
about 28% top-1 and a test loss of about 1.9; chance is 10% (one standard deviation of a guess's top-1
on 1,000 images: about 1 point) and a uniform guess's loss ln(10) = 2.30. The claims report's card
for a smoke run says whether the check held; tests/test_smoke_dag.py fails the smoke DAG when it does
not.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from repro import records

EXPERIMENT = "baseline/resnet32"
MIN_TOP1 = 16.0  # percent: far above chance (10%), well below what the smoke run reaches
MIN_TEST_IMAGES = 1000  # fewer cannot tell learning from chance


def problems(run: Path) -> list[str]:
    """Why the smoke run in the folder ``run`` did not learn (empty: it did)."""
    rec = records.read(Path(run))
    m = rec["metrics"]
    with open(Path(run) / "epochs.csv", newline="") as fh:
        last = list(csv.DictReader(fh))[-1]
    found = []
    if m["n_test_images"] < MIN_TEST_IMAGES:
        found.append(f"{m['n_test_images']:.0f} test images: too few to tell learning from chance")
    if not m["final_top1"] >= MIN_TOP1:
        found.append(f"final top-1 {m['final_top1']:.1f}% < {MIN_TOP1}% (chance is 10%)")
    if not float(last["test_loss"]) < math.log(10):
        found.append(f"final test loss {float(last['test_loss']):.3f} >= ln(10), a uniform guess's")
    return found


@dataclass
class Check:
    """The check on one run: held (None where the run is not a finished smoke run) and the line saying so."""

    held: bool | None
    line: str


def check(runs: dict[str, dict], experiments: list[str]) -> Check | None:
    """The learning check on this machine's runs (repro.report.artifact.experiment_runs); None where
    the experiment it reads is not among ``experiments`` (the experiment files the report reads)."""
    if EXPERIMENT not in experiments:
        return None
    run = runs.get(EXPERIMENT)
    if run is None:
        return Check(None, f"learning check: not run ({EXPERIMENT} has no record here)")
    if run["status"] != "ok" or run["scale"] != "smoke":
        return Check(None, f"learning check: not run ({EXPERIMENT} is {run['status']} at {run['scale']} scale; "
                           "the check reads its smoke run)")
    folder = Path(run["path"]).parent
    try:
        found = problems(folder)
    except (OSError, KeyError, IndexError, ValueError) as exc:
        return Check(False, f"learning check on {EXPERIMENT}: fails, its run cannot be read ({exc})")
    if found:
        return Check(False, f"learning check on {EXPERIMENT}: fails: {'; '.join(found)}")
    m = run["record"]["metrics"]
    return Check(True, f"learning check on {EXPERIMENT}: holds: top-1 {m['final_top1']:.1f}% >= {MIN_TOP1:g}% "
                       f"(chance is 10%) on {m['n_test_images']:.0f} test images, and the final test loss is "
                       "below ln(10), a uniform guess's")
