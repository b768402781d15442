"""The repro MLflow apps (repro.pipeline.mlflow_app; `make mlflow-ui`, the team server): MLflow's own
app with a /repro page that opens the UI on the repro experiments in the model-training view, and
the paper pages the experiments' descriptions link to."""

import json
import tomllib

import pytest

from conftest import REPO
from repro.pipeline import mlflow_app, tracking


@pytest.fixture(scope="module")
def client():
    from mlflow.server import app

    mlflow_app._add_page(app)
    mlflow_app._add_page(app)  # twice (both apps in one process): once
    return app.test_client()


def test_repro_page_sets_the_model_training_workflow_and_opens_the_repro_experiments(client):
    page = client.get(mlflow_app.PAGE)
    assert page.status_code == 200 and page.mimetype == "text/html"
    text = page.get_data(as_text=True)
    # what the UI reads from localStorage: `${key}_v${version}`, JSON
    assert 'localStorage.setItem("mlflow.workflowType_v1", "\\"machine_learning\\"")' in text
    assert 'localStorage.setItem("mlflow.telemetry.info.alert.dismissed_v1", "true")' in text
    assert 'localStorage.setItem("mlflow.settings.telemetry.enabled_v1", "false")' in text
    assert "#/experiments?workflowType=machine_learning&experimentSearchFilter=repro%2F" in text
    assert json.loads('"machine_learning"') == mlflow_app.LOCAL_STORAGE["mlflow.workflowType_v1"]


def test_paper_pages_are_served_for_the_descriptions_links(client):
    page = client.get(f"{mlflow_app.PAPERS}/tsm2x.md")
    assert page.status_code == 200
    title = (REPO / "docs" / "papers" / "tsm2x.md").read_text().splitlines()[0][2:]
    assert title.split(":")[0] in page.get_data(as_text=True)
    assert tracking.page_url("tsm2x") == f"{mlflow_app.PAPERS}/tsm2x.md"
    for missing in ("nosuchpaper.md", "..%2FREADME.md", "README"):
        assert client.get(f"{mlflow_app.PAPERS}/{missing}").status_code == 404


def test_apps_are_registered_as_mlflow_app_plugins():
    """`mlflow ui|server --app-name repro|repro-basic-auth` find them through these entry points."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    apps = project["entry-points"]["mlflow.app"]
    assert apps == {mlflow_app.APP: "repro.pipeline.mlflow_app:create_app",
                    mlflow_app.AUTH_APP: "repro.pipeline.mlflow_app:create_auth_app"}
    assert any(r.startswith("Flask-WTF==") for r in project["optional-dependencies"]["team"])  # basic-auth needs it
