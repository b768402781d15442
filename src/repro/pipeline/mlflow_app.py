"""`python -m repro.pipeline.mlflow_app [--uri sqlite:///results/mlflow.db] [--port 5000]`: the MLflow UI
on the repro experiments (`make mlflow-ui`), and the MLflow apps it and the team server run.

MLflow 3.17's UI opens on a GenAI home page and keeps its workflow (GenAI or model training) in the
browser's localStorage (``mlflow.workflowType_v1``, GenAI when unset); a ``?workflowType=`` query
parameter overrides it for the page it is on only, so an experiment clicked from the list opens in
the GenAI view again. The apps here are MLflow's own (``mlflow.server:app``, and the basic-auth app
``mlflow.server.auth:create_app`` for the team server) with one page added, ``/repro``: it sets
the browser's workflow to model training, dismisses the telemetry notice, turns the UI's
telemetry setting off, leaves the assistant panel closed, and goes on to
``#/experiments?workflowType=machine_learning&experimentSearchFilter=repro/``: the list of the
repro experiments with their descriptions, each opening on its runs table; and ``/repro/papers/<paper>.md``,
the paper pages (docs/papers/) that the descriptions link to. They are registered as
MLflow app plugins (``mlflow.app`` entry points in pyproject.toml: ``repro`` and
``repro-basic-auth``), so ``mlflow ui|server --app-name repro[-basic-auth]`` serve them.

Telemetry: the server runs with MLFLOW_DISABLE_TELEMETRY=true and DO_NOT_TRACK=true, so it sends
nothing and answers the UI's telemetry query with "disabled" (the UI then records nothing). MLflow's
job runner is off (JOBS_OFF) unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION is set.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PAGE = "/repro"
PAPERS = "/repro/papers"  # /repro/papers/<paper>.md: docs/papers/<paper>.md, linked from each experiment's description
# where /repro goes: the experiment list of the model-training workflow, filtered to repro/*
LIST = "#/experiments?workflowType=machine_learning&experimentSearchFilter=repro%2F"
# The UI's localStorage keys (mlflow/server/js: useLocalStorage stores `${key}_v${version}` as JSON)
LOCAL_STORAGE = {
    "mlflow.workflowType_v1": "machine_learning",
    "mlflow.telemetry.info.alert.dismissed_v1": True,
    "mlflow.settings.telemetry.enabled_v1": False,
    "mlflow.assistant.panelOpen_v1": False,
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,
}
# MLflow's own switches for its usage telemetry (mlflow.telemetry.utils.is_telemetry_disabled)
TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
# MLflow's server job runner (huey consumers: four more processes, each importing mlflow, polling while
# the UI is up) runs GenAI jobs (prompt optimisation, scorers, trace roll-ups) that repro's records never
# ask for: off unless the caller's environment turns it on
JOBS_OFF = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
APP = "repro"
AUTH_APP = "repro-basic-auth"


def page_html() -> str:
    import json

    sets = "".join(f"localStorage.setItem({json.dumps(k)}, {json.dumps(json.dumps(v))});"
                   for k, v in LOCAL_STORAGE.items())
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>repro: MLflow</title></head><body>"
            f"<script>try {{ {sets} }} catch (e) {{}}"
            f" location.replace(location.pathname.replace(/{PAGE.strip('/')}\\/?$/, \"\") + \"{LIST}\");</script>"
            f"<p>The repro experiments: <a href=\"./{LIST}\">MLflow, model training</a>.</p></body></html>")


def paper_page_html(paper: str, repo: Path | None = None) -> str | None:
    """docs/papers/<paper>.md as a page (Markdown rendered where markdown-it is installed, else as
    text), or None where the paper has no page."""
    import html

    from repro import layout

    root = Path(repo or layout.REPO_ROOT) / "docs" / "papers"
    if paper not in {p.stem for p in root.glob("*.md")}:
        return None
    text = (root / f"{paper}.md").read_text()
    try:
        from markdown_it import MarkdownIt

        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    except ImportError:
        body = f"<pre>{html.escape(text)}</pre>"
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>docs/papers/{html.escape(paper)}.md</title>"
            "<style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;line-height:1.45}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .4rem}"
            "code{background:#f4f4f4}</style></head><body>"
            f"<p><a href=\"{PAGE}\">repro experiments</a> &middot; docs/papers/{html.escape(paper)}.md</p>{body}</body></html>")


def _add_page(flask_app) -> None:
    from flask import Response, abort

    def paper_page(paper: str):
        page = paper_page_html(paper)
        return Response(page, mimetype="text/html") if page is not None else abort(404)

    if "repro_page" not in flask_app.view_functions:
        flask_app.add_url_rule(PAGE, "repro_page", lambda: Response(page_html(), mimetype="text/html"))
        flask_app.add_url_rule(f"{PAPERS}/<paper>.md", "repro_paper_page", paper_page)


def _served(flask_app):
    """The app as MLflow's server runs it: its FastAPI wrapper under uvicorn (MLflow's default),
    the Flask app under gunicorn or waitress."""
    if os.environ.get("_MLFLOW_SGI_NAME", "uvicorn") == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(flask_app)
    return flask_app


def create_app():
    """MLflow's tracking server and UI (``mlflow.server:app``) with the /repro page."""
    from mlflow.server import app as flask_app

    _add_page(flask_app)
    return _served(flask_app)


def create_auth_app():
    """MLflow's basic-auth app (``mlflow.server.auth:create_app``: every route but /health and the
    static files needs a login) with the /repro page, itself behind the login."""
    from mlflow.server import app as flask_app
    from mlflow.server.auth import create_app as basic_auth

    _add_page(flask_app)
    return basic_auth(flask_app)


def registered() -> bool:
    """Whether the apps are installed as MLflow app plugins (pip install -e . registers them)."""
    from importlib.metadata import entry_points

    return APP in {e.name for e in entry_points(group="mlflow.app")}


def ui_url(base: str) -> str:
    """The address to open: /repro where the app is served, else the list itself (its first page
    only in the model-training view)."""
    return base.rstrip("/") + (PAGE if registered() else "/" + LIST)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri", default="sqlite:///results/mlflow.db", help="the MLflow store (backend store URI)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    from repro.pipeline.tracking import sqlite_path

    db = sqlite_path(args.uri)
    if db is not None and not db.exists():
        print(f"mlflow-ui: {db} does not exist yet: run the workflow first (make); the UI starts empty",
              file=sys.stderr)
    mlflow = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow), "ui", "--backend-store-uri", args.uri, "--host", args.host, "--port", str(args.port),
           "--workers", "1"]
    if registered():
        cmd[2:2] = ["--app-name", APP]
    else:
        print("mlflow-ui: the repro app is not installed (make setup); serving MLflow's own", file=sys.stderr)
    env = {**JOBS_OFF, **os.environ, **TELEMETRY_OFF}
    # the server runs in a session of its own; Ctrl-C (SIGINT) or SIGTERM here stops it (below),
    # SIGINT too where a shell started this in the background (which ignores it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    base = f"http://{shown}:{args.port}"
    try:
        for _ in range(240):
            if proc.poll() is not None:
                return proc.returncode
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        print(f"\nMLflow UI (telemetry off): open {ui_url(base)}\n"
              "  the repro experiments in MLflow's model-training view; Ctrl-C stops it\n", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
