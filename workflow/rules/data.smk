# Dataset prep: CIFAR-10 from the JPEG shards, the official release or a local folder, into one
# checksummed array file per split that every training job reads.


from repro.prepared import MANIFEST, broken_splits

# A prepared split that no longer matches its manifest (truncated, deleted) makes the data step
# rerun: its manifest is removed here, so Snakemake sees an output missing (Snakemake itself only
# looks at presence and times, not content).
_broken = broken_splits("results/data/cifar10")
if _broken:
    print("repro: results/data/cifar10 is damaged (" + "; ".join(_broken) + "): the cifar10 step reruns",
          file=sys.stderr)
    Path("results/data/cifar10", MANIFEST).unlink(missing_ok=True)


# The source is checked as its own step: Snakemake deletes a job's outputs before running it, so
# checking inside the cifar10 step would delete good prepared splits before a corrupt new source
# is refused. This step's output is only a stamp.
rule cifar10_source:
    output:
        "results/data/cifar10-source.json",
    log:
        "results/logs/data/cifar10-source.log",
    params:
        source=config["cifar10_source"],
        shards=config["cifar10_train_shards"][SCALE] or 5,
    container:
        CPU_IMAGE
    shell:
        "python -m repro.data.cifar10 --source {params.source} --check --train-shards {params.shards} "
        "> {output} 2> {log}"


rule cifar10:
    input:
        checked=rules.cifar10_source.output,
    output:
        train="results/data/cifar10/train.npz",
        test="results/data/cifar10/test.npz",
        manifest="results/data/cifar10/manifest.json",
    log:
        "results/logs/data/cifar10.log",
    params:
        source=config["cifar10_source"],
        shards=config["cifar10_train_shards"][SCALE] or 5,
    container:
        CPU_IMAGE
    shell:
        "python -m repro.data.cifar10 --source {params.source} --out results/data/cifar10 "
        "--train-shards {params.shards} > {log} 2>&1"
