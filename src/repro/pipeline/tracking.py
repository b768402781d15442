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
(`http://host:5000`) to share runs with a team, and ``--credentials FILE`` where it asks for a
login (MLflow's basic-auth app, `tools/mlflow_server.sh`: a file of ``MLFLOW_TRACKING_USERNAME=``
and ``MLFLOW_TRACKING_PASSWORD=`` lines; those variables in the environment work too).

What the MLflow UI shows (issue 47):
- each ``repro/<paper>`` experiment is described (``mlflow.note.content``) from its paper page
  (docs/papers/<paper>.md: the title and first paragraph), its claim ids (config/claims/<paper>.yaml)
  and a link to the page, and is marked a model-training experiment (``mlflow.experimentKind``:
  the type the UI shows it as, "Machine learning"). Which view the UI opens an experiment in (the
  classic runs table, or the GenAI overview) follows the browser's workflow setting, not this tag
  (MLflow 3.17): the address `make mlflow-ui` prints sets it (repro.pipeline.mlflow_app);
- a run is named for its experiment and scale (``tsm2_r (smoke)``); a skipped record (no GPU here)
  is a FINISHED run tagged ``skipped`` = the reason, not a KILLED one;
- a rerun's older run: the run of an earlier record from the same results folder (tag
  ``repro.results`` = host:/path/to/results) for the same experiment is tagged
  ``repro.superseded=true`` (and ``repro.superseded_by``) and moved to MLflow's *deleted* lifecycle
  stage: the UI's runs table hides it by default and lists it under its Deleted filter, and
  ``mlflow runs restore --run-id`` brings it back (until ``mlflow gc`` purges deleted runs). Runs
  from other folders or machines are never touched, so a team's server keeps everyone's.
Runs ingested by an earlier version are brought to these names, tags and statuses as they are met.
MLflow's telemetry is off in this process (MLFLOW_DISABLE_TELEMETRY, DO_NOT_TRACK) unless the
environment says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd

from repro import layout, records
from repro.faults import kill_point
from repro.pipeline import mlflow_app
from repro.records import atomic_write_text

TAG = "repro.record_id"
DONE = "repro.ingested"  # set last: the digest of the record file a complete run holds
ORIGIN = "repro.results"  # host:/abs/path/results, the results folder the run's record came from
SUPERSEDED = "repro.superseded"
SUPERSEDED_BY = "repro.superseded_by"
SKIPPED = "skipped"  # a skipped record's run: the reason
DESCRIPTION = "mlflow.note.content"  # MLflow's experiment (and run) description
KIND = "mlflow.experimentKind"  # the experiment's type in the UI: custom_model_development, "Machine learning"
KIND_VALUE = "custom_model_development"
TELEMETRY_OFF = mlflow_app.TELEMETRY_OFF
CREDENTIAL_KEYS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def telemetry_off(env=None) -> None:
    """Turn MLflow's telemetry off in ``env`` (os.environ by default) where it does not say otherwise."""
    env = os.environ if env is None else env
    for key, value in TELEMETRY_OFF.items():
        env.setdefault(key, value)


def read_credentials(path: Path) -> dict[str, str]:
    """The MLflow login in ``path``: ``KEY=VALUE`` lines (``export`` and quotes allowed, ``#``
    comments), of which MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD are used."""
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key.strip() in CREDENTIAL_KEYS:
            out[key.strip()] = value
    missing = [k for k in CREDENTIAL_KEYS if not out.get(k)]
    if missing:
        raise ValueError(f"{path}: no {' or '.join(missing)}")
    return out


def run_name(rec: dict) -> str:
    """A run's name in the UI: its experiment and scale, ``tsm2_r (smoke)``."""
    return f"{rec['experiment']} ({rec['scale']})"


def origin(results: Path) -> str:
    """The results folder the records come from, as ``host:/abs/path``: a rerun supersedes only
    runs of the same folder."""
    return f"{socket.gethostname()}:{Path(results).resolve()}"


_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def _plain(text: str) -> str:
    """Markdown links to their text (the page's relative links lead nowhere from the UI)."""
    return _LINK.sub(r"\1", text)


def page_url(paper: str) -> str:
    """The link to a paper's page: $REPRO_DOCS_URL/docs/papers/<paper>.md where set (a web view of
    the repository, e.g. https://git.example.org/repro/blob/main), else the page as the repro MLflow
    apps serve it (/repro/papers/<paper>.md, repro.pipeline.mlflow_app), a path on the UI's own
    server: the UI drops file:// links."""
    base = os.environ.get("REPRO_DOCS_URL", "").rstrip("/")
    return f"{base}/docs/papers/{paper}.md" if base else f"{mlflow_app.PAPERS}/{paper}.md"


def paper_description(paper: str, repo: Path | None = None, config: Path | None = None) -> str:
    """The description (Markdown) of the ``repro/<paper>`` experiment: its page's title and first
    paragraph, its claim ids and a link to the page. Without a page: the claims file's first
    comment line stands for the title."""
    repo = Path(repo or layout.REPO_ROOT)
    page = repo / "docs" / "papers" / f"{paper}.md"
    claims_file = Path(config or layout.config_dir()) / "claims" / f"{paper}.yaml"
    title, para = paper, ""
    if page.is_file():
        lines = page.read_text().splitlines()
        heads = [i for i, line in enumerate(lines) if line.startswith("# ")]
        if heads:
            title = lines[heads[0]][2:].strip()
            body = []
            for line in lines[heads[0] + 1:]:
                if line.strip():
                    if line.startswith(("#", "|", "```")):
                        break
                    body.append(line.strip())
                elif body:
                    break
            para = _plain(" ".join(body))
    ids = []
    if claims_file.is_file():
        text = claims_file.read_text()
        ledger = layout.load_yaml(text) or {}
        ids = [c["id"] for c in ledger.get("claims") or [] if isinstance(c, dict) and "id" in c]
        if not page.is_file():
            first = next((line for line in text.splitlines() if line.startswith("#")), "")
            title = first.lstrip("# ").strip() or title
    parts = [_plain(title)]
    if para:
        parts.append(para)
    parts.append(f"Claims ({len(ids)}, config/claims/{paper}.yaml): " + (", ".join(f"`{i}`" for i in ids) or "none"))
    if page.is_file():
        parts.append(f"Paper page: [docs/papers/{paper}.md]({page_url(paper)})")
    else:
        parts.append(f"Paper page: none (docs/papers/{paper}.md is missing)")
    return "\n\n".join(parts)[:5000]


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


def _experiment(client, name: str, location: str | None, tags: dict[str, str] | None = None) -> str:
    """The experiment's id (created where missing), with ``tags`` set where they differ."""
    from mlflow.exceptions import MlflowException

    tags = tags or {}
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=location, tags=tags)
        except MlflowException:  # another ingestion (on a server) created it first
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    for key, value in tags.items():
        if exp.tags.get(key) != value:
            client.set_experiment_tag(exp.experiment_id, key, value)
    return exp.experiment_id


def _conform(client, run, rec: dict, where: str) -> None:
    """Bring a complete run logged by an earlier version to today's name, tags and status."""
    rid, tags = run.info.run_id, run.data.tags
    if tags.get("mlflow.runName") != run_name(rec) or run.info.status != "FINISHED":
        client.update_run(rid, status="FINISHED", name=run_name(rec))
    if ORIGIN not in tags:
        client.set_tag(rid, ORIGIN, where)
    if rec["status"] == "skipped" and tags.get(SKIPPED) != (rec.get("reason") or "skipped"):
        client.set_tag(rid, SKIPPED, rec.get("reason") or "skipped")


def _supersede(client, exp_id: str, rec: dict, current: str, where: str) -> list[str]:
    """Tag and delete (MLflow's deleted stage: hidden by default, restorable) the runs of
    ``rec``'s experiment from the same results folder that hold another record: a rerun's older
    runs. Runs of other folders or hosts stay. Legacy runs without the folder tag count as this
    folder's when their record was made on this host. Returns the run ids it moved."""
    from mlflow.exceptions import MlflowException

    found = client.search_runs([exp_id], filter_string=f"tags.`repro.experiment` = '{rec['experiment']}'",
                               max_results=1000)
    host = rec["provenance"].get("hostname")
    moved = []
    for r in found:
        tags = r.data.tags
        if r.info.run_id == current or tags.get(TAG) == rec["record_id"]:
            continue
        if not (tags.get(ORIGIN) == where or (ORIGIN not in tags and tags.get("prov.hostname") == host)):
            continue
        try:
            client.set_tag(r.info.run_id, SUPERSEDED, "true")
            client.set_tag(r.info.run_id, SUPERSEDED_BY, current)
            client.delete_run(r.info.run_id)
        except MlflowException:  # a parallel ingestion of the same folder got there first
            continue
        moved.append(r.info.run_id)
    return moved


def _log(client, exp_id: str, rec: dict, digest: str, results: Path, where: str = "") -> str:
    """Log one record as a new run; the DONE tag, set last, marks it complete."""
    tags = {TAG: rec["record_id"], "repro.status": rec["status"], "repro.pipeline.scale": rec["scale"],
            "repro.experiment": rec["experiment"], "mlflow.runName": run_name(rec), ORIGIN: where or origin(results),
            **{f"prov.{k}": v[:5000] for k, v in _flatten(
                {k: v for k, v in rec["provenance"].items() if k != "code"}).items()},
            # the code digests as one JSON tag, not a tag per source file
            **({"prov.code": json.dumps(rec["provenance"]["code"])[:5000]} if rec["provenance"].get("code") else {}),
            **{f"tag.{k}": v for k, v in rec.get("tags", {}).items()}}
    if rec.get("reason"):
        tags["repro.reason"] = rec["reason"]
    if rec["status"] == "skipped":  # not a failure: a FINISHED run that says why it did nothing
        tags[SKIPPED] = rec.get("reason") or "skipped"
    run = client.create_run(exp_id, tags=tags)
    rid = run.info.run_id
    kill_point("tracking.run_created")
    from mlflow.entities import Metric, Param

    # in batches (MLflow's limits: 100 params, 1000 params and metrics a call), not a transaction per value
    now = int(time.time() * 1000)
    params = [Param(k[:250], v[:6000]) for k, v in _flatten(rec["params"]).items()]
    metrics = [Metric(k, v, now, 0) for k, v in rec["metrics"].items() if math.isfinite(v)]
    # per-epoch tables become step metrics, so MLflow draws the curves
    rec_dir = Path(rec["_dir"])
    epochs = rec_dir / "epochs.csv"
    if epochs.exists():
        df = pd.read_csv(epochs)
        if "epoch" in df:
            for col in df.select_dtypes("number").columns.drop("epoch"):
                metrics += [Metric(f"epoch.{col}", float(val), now, int(step))
                            for step, val in zip(df["epoch"], df[col]) if math.isfinite(val)]
    while params or metrics:  # as few calls as MLflow's limits allow (one for most records)
        batch_params, params = params[:100], params[100:]
        room = 1000 - len(batch_params)
        batch_metrics, metrics = metrics[:room], metrics[room:]
        client.log_batch(rid, params=batch_params, metrics=batch_metrics)
    kill_point("tracking.logged")
    client.log_artifacts(rid, str(rec_dir), artifact_path="run")
    # the experiment's figure (the figure rule's PNG and PDF), where it has been drawn
    for suffix in ("png", "pdf"):
        figure = Path(results) / "figures" / rec["paper"] / f"{rec_dir.name}.{suffix}"
        if figure.is_file():
            client.log_artifact(rid, str(figure), artifact_path="figure")
    client.set_terminated(rid, status="FINISHED")
    client.set_tag(rid, DONE, digest)
    return rid


def ingest(results: Path, uri: str, artifact_root: Path | None = None) -> dict:
    telemetry_off()
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(uri)
    summary = {"uri": uri, "logged": [], "already": [], "repaired": [], "superseded": [], "runs": {}}
    began_ms = int(time.time() * 1000)
    where = origin(results)
    exp_ids: dict[str, str] = {}  # paper -> its MLflow experiment, looked up (or made) once
    # an SQLite store is held under store_lock for the whole ingestion: no other ingestion can log or
    # delete a run meanwhile, so a run this one logs is the record's run (a server has no such lock:
    # there each logged run is checked against what racing ingestions logged)
    locked = sqlite_path(uri) is not None
    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        for rec_path in records.find(results):
            rec = records.read(rec_path)
            digest = record_digest(rec_path)
            location = None
            if artifact_root is not None and uri.startswith("sqlite"):
                location = (Path(artifact_root) / rec["paper"]).resolve().as_uri()
            paper = rec["paper"]
            if paper not in exp_ids:
                exp_ids[paper] = _experiment(client, f"repro/{paper}", location,
                                             {DESCRIPTION: paper_description(paper), KIND: KIND_VALUE})
            exp_id = exp_ids[paper]
            rid = None
            for _attempt in range(3):
                runs = _runs_of(client, exp_id, rec["record_id"])
                best = _winner(runs, digest)
                if best is not None:
                    rid = best.info.run_id
                    _conform(client, best, rec, where)
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
                    mine = _log(client, exp_id, rec, digest, results, where)
                except MlflowException:  # our run was deleted under us by a racing ingestion
                    continue
                if locked:
                    rid = mine
                    summary["logged"].append(rec["record_id"])
                    break
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
            summary["superseded"] += _supersede(client, exp_id, rec, rid, where)
            summary["runs"][rec["record_id"]] = {"run_id": rid, "experiment_id": exp_id}
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--uri", default="sqlite:///results/mlflow.db", help="MLflow tracking URI")
    ap.add_argument("--artifacts", type=Path, default=Path("results/mlflow-artifacts"),
                    help="artifact folder for the embedded SQLite store")
    ap.add_argument("--out", type=Path, help="write a JSON summary of what was logged here")
    ap.add_argument("--credentials", default="",
                    help="a server's login: a file of MLFLOW_TRACKING_USERNAME= and MLFLOW_TRACKING_PASSWORD= "
                         "lines (tools/mlflow_server.sh writes results/mlflow-server/credentials); "
                         "default: those variables from the environment, if set")
    args = ap.parse_args(argv)
    if args.credentials:
        try:
            os.environ.update(read_credentials(args.credentials))
        except (OSError, ValueError) as exc:
            print(f"repro.pipeline.tracking: error: credentials: {exc}", file=sys.stderr)
            return 2
    from repro.pipeline import watchdog

    watchdog.start()  # an ingestion of a killed workflow stops (repro.pipeline.watchdog); a rerun repairs it
    try:
        summary = ingest(args.results, args.uri, args.artifacts)
    except records.RecordError as exc:
        print(f"repro.pipeline.tracking: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - say what a login refusal means, then fail as before
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException) and re.search(r"\b(401|403)\b|UNAUTHENTICATED|PERMISSION_DENIED", str(exc)):
            print(f"repro.pipeline.tracking: error: {args.uri} refused the login ({exc}); pass the server's "
                  "credentials file (--credentials; the workflow's mlflow_credentials) or set "
                  "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD", file=sys.stderr)
            return 3
        raise
    repaired = f", {len(summary['repaired'])} incomplete leftover(s) redone" if summary["repaired"] else ""
    superseded = (f", {len(summary['superseded'])} older run(s) superseded (deleted stage)"
                  if summary["superseded"] else "")
    print(f"mlflow ({args.uri}): {len(summary['logged'])} runs logged, {len(summary['already'])} already there"
          f"{repaired}{superseded}")
    if args.out:
        atomic_write_text(args.out, json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
