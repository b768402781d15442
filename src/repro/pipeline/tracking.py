"""`python -m repro.pipeline.tracking --results results --uri sqlite:///results/mlflow.db`

The one MLflow writer: logs every run record under results/ into MLflow. Experiment jobs never
touch the MLflow store (parallel jobs and SQLite do not mix); this step runs once, after them.
Each record maps to one MLflow run tagged with its record id, so re-ingesting adds nothing; its
folder (record, tables) is logged as the run's artifacts under `run/`, and its experiment's figure
(results/figures/<paper>/<name>.png and .pdf, where drawn) under `figure/`. The
summary (``--out``) maps every record id to its run, for the claims report's links.

Safe against concurrent and killed ingestions:
- on an embedded SQLite store, one ingestion at a time: an exclusive lock (``fcntl``) on
  ``<store>.lock`` beside the database covers the table creation/migration MLflow does on first
  open and every search-then-create (two ingestions on a new store otherwise race in MLflow's
  migrations and can leave it unopenable);
- everywhere (also on a server, where a local lock cannot reach), a run counts as "there" only if
  it is complete: its last step sets the tag ``repro.ingested`` to the digest of the record file.
  A leftover for the same record without it (a killed ingestion's RUNNING run with no metrics) is
  deleted and the record logged again; if a race on a server still made two complete runs, every
  ingestion keeps the same winner (earliest start, then run id) and deletes the others.
The default store is embedded SQLite (MLflow 3 refuses plain file stores); pass a server URI
(`http://host:5000`) to share runs with a team.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd

from repro import records
from repro.faults import kill_point
from repro.records import atomic_write_text

TAG = "repro.record_id"
DONE = "repro.ingested"  # set last: the digest of the record file a complete run holds


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


def sqlite_path(uri: str) -> Path | None:
    """The database file of an embedded SQLite URI (``sqlite:///rel`` or ``sqlite:////abs``), else None."""
    if not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    path = path[1:] if path.startswith("/") else path  # sqlite:///x -> 'x', sqlite:////x -> '/x'
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def store_lock(uri: str):
    """Hold an exclusive lock on ``<db>.lock`` for an SQLite store (nothing for a server): released
    by the kernel when the holder dies, so a killed ingestion never leaves it held."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def record_digest(rec_path: Path) -> str:
    return hashlib.sha256(Path(rec_path).read_bytes()).hexdigest()[:32]


def _runs_of(client, exp_id: str, record_id: str) -> list:
    return list(client.search_runs([exp_id], filter_string=f"tags.`{TAG}` = '{record_id}'", max_results=1000))


def _winner(runs: list, digest: str):
    """The complete run every ingestion keeps (earliest start, then run id), or None."""
    done = [r for r in runs if r.data.tags.get(DONE) == digest]
    return min(done, key=lambda r: (r.info.start_time, r.info.run_id)) if done else None


def _experiment(client, name: str, location: str | None) -> str:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:  # another ingestion (on a server) created it first
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _log(client, exp_id: str, rec: dict, digest: str, results: Path) -> str:
    """Log one record as a new run; the DONE tag, set last, marks it complete."""
    tags = {TAG: rec["record_id"], "repro.status": rec["status"], "repro.pipeline.scale": rec["scale"],
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
    kill_point("tracking.run_created")
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
    kill_point("tracking.logged")
    client.log_artifacts(rid, str(rec_dir), artifact_path="run")
    # the experiment's figure (the figure rule's PNG and PDF), where it has been drawn
    for suffix in ("png", "pdf"):
        figure = Path(results) / "figures" / rec["paper"] / f"{rec_dir.name}.{suffix}"
        if figure.is_file():
            client.log_artifact(rid, str(figure), artifact_path="figure")
    client.set_terminated(rid, status="FINISHED" if rec["status"] == "ok" else "KILLED")
    client.set_tag(rid, DONE, digest)
    return rid


def ingest(results: Path, uri: str, artifact_root: Path | None = None) -> dict:
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(uri)
    summary = {"uri": uri, "logged": [], "already": [], "repaired": [], "runs": {}}
    began_ms = int(time.time() * 1000)
    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        for rec_path in records.find(results):
            rec = records.read(rec_path)
            digest = record_digest(rec_path)
            location = None
            if artifact_root is not None and uri.startswith("sqlite"):
                location = (Path(artifact_root) / rec["paper"]).resolve().as_uri()
            exp_id = _experiment(client, f"repro/{rec['paper']}", location)
            rid = None
            for _attempt in range(3):
                runs = _runs_of(client, exp_id, rec["record_id"])
                best = _winner(runs, digest)
                if best is not None:
                    rid = best.info.run_id
                    summary["already"].append(rec["record_id"])
                    break
                # leftovers of a killed ingestion (or an older copy of the record): redo. On a
                # server, a run another ingestion started after this one began is left to it.
                stale = [r for r in runs if r.info.start_time < began_ms or r.info.status != "RUNNING"]
                for r in stale:
                    client.delete_run(r.info.run_id)
                if stale:
                    summary["repaired"].append(rec["record_id"])
                try:
                    mine = _log(client, exp_id, rec, digest, results)
                except MlflowException:  # our run was deleted under us by a racing ingestion
                    continue
                after = _runs_of(client, exp_id, rec["record_id"])
                best = _winner(after, digest)
                for r in after:
                    if best is not None and r.info.run_id != best.info.run_id and r.data.tags.get(DONE) == digest:
                        client.delete_run(r.info.run_id)  # a race made two: the same winner everywhere
                rid = best.info.run_id if best is not None else mine
                summary["logged" if rid == mine else "already"].append(rec["record_id"])
                break
            if rid is None:
                raise RuntimeError(f"repro.pipeline.tracking: could not log {rec_path} (kept being raced)")
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
    from repro.pipeline import watchdog

    watchdog.start()  # an ingestion of a killed workflow stops (repro.pipeline.watchdog); a rerun repairs it
    try:
        summary = ingest(args.results, args.uri, args.artifacts)
    except records.RecordError as exc:
        print(f"repro.pipeline.tracking: error: {exc}", file=sys.stderr)
        return 2
    repaired = f", {len(summary['repaired'])} incomplete leftover(s) redone" if summary["repaired"] else ""
    print(f"mlflow ({args.uri}): {len(summary['logged'])} runs logged, {len(summary['already'])} already there"
          f"{repaired}")
    if args.out:
        atomic_write_text(args.out, json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
