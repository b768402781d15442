# Set-up and the common commands. `make` = set up, then run the whole DAG; `make test` = the tests.
VENV        ?= .venv
PY          := $(VENV)/bin/python
# The CPU machines keep a local torch 2.13 CPU wheel; a GPU machine brings its own torch (>= 2.11).
TORCH_SPEC  ?= torch==2.13.0
CORES       ?= all
SNAKEMAKE   := PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/snakemake

.PHONY: all setup test smoke paper lint mlflow-ui bench-pipeline wheelhouse clean-results help \
        slurm-plugin slurm-test mlflow-server mlflow-server-stop container browser-test readme

all: setup                ## set up, then run the whole DAG (paper scale with a GPU, smoke without)
	$(SNAKEMAKE) --cores $(CORES)

setup: $(VENV)/.installed ## create .venv and install repro with its pinned dependencies

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# pytest-xdist workers for `make test`: one per core, at most 8 (TEST_WORKERS=0: one process)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n > 8 ? 8 : n )))

test: setup               ## run the test suite on TEST_WORKERS processes (GPU tests skip without a GPU); writes results/tests/junit.xml
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --junitxml=results/tests/junit.xml

smoke: setup              ## the whole DAG at the tiny CPU scale
	$(SNAKEMAKE) --cores $(CORES) --config scale=smoke

paper: setup              ## the whole DAG at paper scale (needs a CUDA GPU)
	$(SNAKEMAKE) --cores $(CORES) --config scale=paper

lint: setup               ## snakemake --lint
	$(SNAKEMAKE) --lint

MLFLOW_UI_PORT ?= 5000
mlflow-ui: setup          ## browse the runs (telemetry off); prints the URL: http://127.0.0.1:5000/repro
	$(PY) -m repro.pipeline.mlflow_app --uri sqlite:///results/mlflow.db --host 127.0.0.1 --port $(MLFLOW_UI_PORT)

# The real services (tests/real; .ci/run runs them all). Each installs its Debian packages if missing (root).
REAL_TEST   := PYTHONPATH=$(abspath src) $(VENV)/bin/python -m pytest -q

# pyproject.toml's `slurm` extra
SLURM_SPEC  := snakemake-executor-plugin-slurm==2.8.0

slurm-plugin: setup       ## install the SLURM executor plugin (the `slurm` extra; not in `setup`: it slows every Snakemake start)
	$(PY) -c "import snakemake_executor_plugin_slurm" 2>/dev/null || $(PY) -m pip install -q "$(SLURM_SPEC)"

slurm-test: slurm-plugin  ## start a single-node SLURM cluster (tools/slurm_local.sh), run a DAG slice through it
	bash tools/slurm_local.sh start
	REPRO_REQUIRE_SERVICES=slurm $(REAL_TEST) tests/real/test_real_slurm.py

mlflow-server: setup      ## start a team MLflow server on its own PostgreSQL behind a login (results/mlflow-server/credentials); prints its URI
	bash tools/mlflow_server.sh start

mlflow-server-stop:       ## stop that server and its PostgreSQL
	bash tools/mlflow_server.sh stop

container:                ## build the CPU step image with podman, export OCI archive + containers/repro-cpu.sif
	bash tools/container.sh

browser-test: setup       ## headless Chromium on the MLflow UI and the claims report (screenshots: results/tests/screenshots)
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	REPRO_REQUIRE_SERVICES=chromium $(REAL_TEST) tests/real/test_real_browser.py tests/test_report_browser.py

readme: setup             ## regenerate README's per-experiment table from the committed records (rows: docs/results-table.yaml)
	$(PY) -m repro.report.readme

bench-pipeline: setup     ## pipeline speed: clean smoke DAG, no-op rerun, DAG build, per-job cost (BENCH_ARGS=--quick: no clean DAG; --tests: also make test)
	PATH=$(abspath $(VENV))/bin:$$PATH PYTHONPATH=$(abspath src) $(PY) benchmarks/pipeline.py $(BENCH_ARGS)

wheelhouse:               ## cp312 wheels of what a GPU machine lacks, for air-gapped clusters (.whl/)
	bash tools/wheelhouse.sh

clean-results:            ## remove this machine's results (keeps results/reference/)
	find results -mindepth 1 -maxdepth 1 ! -name reference -exec rm -rf {} +

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'
