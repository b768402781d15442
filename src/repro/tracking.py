"""`python -m repro.tracking --results results --uri sqlite:///results/mlflow.db`

The one MLflow writer: logs every run record under results/ into MLflow. Experiment jobs never
touch the MLflow store (parallel jobs and SQLite do not mix); this step runs once, after them.
Each record maps to one MLflow run tagged with its record id, so re-ingesting adds nothing; its
folder (record, tables) is logged as the run's artifacts under `run/`, and its experiment's figure
(results/figures/<paper>/<name>.png and .pdf, where drawn) under `figure/`. The
summary (``--out``) maps every record id to its run, for the claims report's links.
The default store is embedded SQLite (MLflow 3 refuses plain file stores); pass a server URI
(`http://host:5000`) to share runs with a team.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from repro import records
from repro.records import atomic_write_text

TAG = "repro.record_id"


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


def ingest(results: Path, uri: str, artifact_root: Path | None = None) -> dict:
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    summary = {"uri": uri, "logged": [], "already": [], "runs": {}}
    for rec_path in records.find(results):
        rec = records.read(rec_path)
        name = f"repro/{rec['paper']}"
        exp = client.get_experiment_by_name(name)
        if exp is None:
            location = None
            if artifact_root is not None and uri.startswith("sqlite"):
                location = (Path(artifact_root) / rec["paper"]).resolve().as_uri()
            exp_id = client.create_experiment(name, artifact_location=location)
        else:
            exp_id = exp.experiment_id
        found = client.search_runs([exp_id], filter_string=f"tags.`{TAG}` = '{rec['record_id']}'", max_results=1)
        if found:
            summary["already"].append(rec["record_id"])
            summary["runs"][rec["record_id"]] = {"run_id": found[0].info.run_id, "experiment_id": exp_id}
            continue
        tags = {TAG: rec["record_id"], "repro.status": rec["status"], "repro.scale": rec["scale"],
                "repro.experiment": rec["experiment"], "mlflow.runName": rec["experiment"],
                **{f"prov.{k}": v[:5000] for k, v in _flatten(
                    {k: v for k, v in rec["provenance"].items() if k != "code"}).items()},
                # the code digests as one JSON tag, not a tag per source file
                **({"prov.code": json.dumps(rec["provenance"]["code"])[:5000]} if rec["provenance"].get("code") else {}),
                **{f"tag.{k}": v for k, v in rec.get("tags", {}).items()}}
        if rec.get("reason"):
            tags["repro.reason"] = rec["reason"]
        run = client.create_run(exp_id, tags=tags)
        rid = run.info.run_id
        for k, v in _flatten(rec["params"]).items():
            client.log_param(rid, k[:250], v[:6000])
        for k, v in rec["metrics"].items():
            if math.isfinite(v):
                client.log_metric(rid, k, v)
        # per-epoch tables become step metrics, so MLflow draws the curves
        rec_dir = Path(rec["_dir"])
        epochs = rec_dir / "epochs.csv"
        if epochs.exists():
            df = pd.read_csv(epochs)
            if "epoch" in df:
                for col in df.select_dtypes("number").columns.drop("epoch"):
                    for step, val in zip(df["epoch"], df[col]):
                        if math.isfinite(val):
                            client.log_metric(rid, f"epoch.{col}", float(val), step=int(step))
        client.log_artifacts(rid, str(rec_dir), artifact_path="run")
        # the experiment's figure (the figure rule's PNG and PDF), where it has been drawn
        for suffix in ("png", "pdf"):
            figure = Path(results) / "figures" / rec["paper"] / f"{rec_dir.name}.{suffix}"
            if figure.is_file():
                client.log_artifact(rid, str(figure), artifact_path="figure")
        client.set_terminated(rid, status="FINISHED" if rec["status"] == "ok" else "KILLED")
        summary["logged"].append(rec["record_id"])
        summary["runs"][rec["record_id"]] = {"run_id": rid, "experiment_id": exp_id}
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--uri", default="sqlite:///results/mlflow.db", help="MLflow tracking URI")
    ap.add_argument("--artifacts", type=Path, default=Path("results/mlflow-artifacts"),
                    help="artifact folder for the embedded SQLite store")
    ap.add_argument("--out", type=Path, help="write a JSON summary of what was logged here")
    args = ap.parse_args(argv)
    try:
        summary = ingest(args.results, args.uri, args.artifacts)
    except records.RecordError as exc:
        print(f"repro.tracking: error: {exc}", file=sys.stderr)
        return 2
    print(f"mlflow ({args.uri}): {len(summary['logged'])} runs logged, {len(summary['already'])} already there")
    if args.out:
        atomic_write_text(args.out, json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
