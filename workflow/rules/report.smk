# Figures, the claims report and the one MLflow writer (whose run ids the report links).
FIGURES = DAG_CACHE.get("figures", lambda: [e for e in EXPERIMENTS if layout.experiment_file(e).get("figure")])


rule figure:
    input:
        record=rules.experiment.output.record,
    output:
        png=report("results/figures/{experiment}.png", caption="../report/figure.rst", category=report_paper,
                   subcategory=report_experiment, labels=report_labels),
        pdf="results/figures/{experiment}.pdf",
    log:
        "results/logs/figures/{experiment}.log",
    params:
        reference=config["reference_root"],
    wildcard_constraints:
        experiment=layout.alternatives(FIGURES),
    container:
        CPU_IMAGE
    shell:
        f"{PY_M} repro.figures $(dirname {{input.record}}) {{output.png}} --reference {{params.reference}} > {{log}} 2>&1"


rule mlflow:
    input:
        records=expand(rules.experiment.output.record, experiment=EXPERIMENTS),
    output:
        summary="results/mlflow/ingested.json",
    log:
        "results/logs/mlflow.log",
    params:
        uri=config["mlflow_uri"],
        # the file's path only (never the password) on the command line; not an input: a secret,
        # outside the DAG, which a rotated password must not rerun
        credentials=(f"--credentials {shlex.quote(config['mlflow_credentials'])}"
                     if config.get("mlflow_credentials") else ""),
    container:
        CPU_IMAGE
    shell:
        "python -m repro.pipeline.tracking --results results --uri {params.uri} {params.credentials} "
        "--out {output.summary} > {log} 2>&1"


# The report also reads results/tests/junit.xml where `make test` wrote one, and writes a screenshot
# (results/claims/report.png) where Chromium is installed: neither is a file the DAG makes.
rule claims:
    input:
        ledger=[provenance.repo_path(p) for p in layout.claims_files()],
        records=expand(rules.experiment.output.record, experiment=EXPERIMENTS),
        figures=expand(rules.figure.output.png, experiment=FIGURES),
        mlflow=rules.mlflow.output.summary,
    output:
        csv="results/claims/claims.csv",
        report=report("results/claims/report.html", caption="../report/claims.rst", category="claims"),
        md="results/claims/report.md",
        chart=report("results/claims/claims_chart.png", caption="../report/claims.rst", category="claims"),
    log:
        "results/logs/claims.log",
    params:
        reference=config["reference_root"],
    container:
        CPU_IMAGE
    shell:
        "python -m repro.report --ledger config/claims --results results --reference {params.reference} "
        "--figures {input.figures} --out results/claims --screenshot results/claims/report.png > {log} 2>&1"
