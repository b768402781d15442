# Figures, the claims report and the one MLflow writer.


rule figure:
    input:
        record=figure_record,
    output:
        png="results/figures/{name}.png",
        pdf="results/figures/{name}.pdf",
    log:
        "results/logs/figures/{name}.log",
    params:
        reference=config["reference_root"],
    container:
        CPU_IMAGE
    shell:
        "python -m repro.figures $(dirname {input.record}) {output.png} --reference {params.reference} > {log} 2>&1"


rule claims:
    input:
        ledger="config/claims.yaml",
        records=[record(e) for e in FIGURES.values()],
        figures=[f"results/figures/{name}.png" for name in FIGURES],
    output:
        csv="results/claims/claims.csv",
        report="results/claims/report.html",
        md="results/claims/report.md",
    log:
        "results/logs/claims.log",
    params:
        reference=config["reference_root"],
    container:
        CPU_IMAGE
    shell:
        "python -m repro.claims --ledger {input.ledger} --results results --reference {params.reference} "
        "--figures {input.figures} --out results/claims > {log} 2>&1"


rule mlflow:
    input:
        records=[record(e) for e in FIGURES.values()],
    output:
        summary="results/mlflow/ingested.json",
    log:
        "results/logs/mlflow.log",
    params:
        uri=config["mlflow_uri"],
    container:
        CPU_IMAGE
    shell:
        "python -m repro.tracking --results results --uri {params.uri} --out {output.summary} > {log} 2>&1"
