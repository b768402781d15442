# Dataset prep: CIFAR-10 from the JPEG shards, the official release or a local folder, into one
# checksummed array file per split that every training job reads.


# A prepared split that no longer matches its manifest (truncated, say) must make the data step
# rerun, but Snakemake looks only at whether outputs exist and at their times, not at their content.
# So the damage is read while the DAG is built (cifar10_damage: reading only, so that a dry run or a
# lint changes nothing) and reaches the cifar10 step through a stamp: while the splits are damaged
# the stamp's job reruns (its params name the damage) and the cifar10 step counts the stamp's time,
# so it reruns too; while they are whole the step takes the stamp as ancient(), so the stamp's job
# rerunning once after a repair, to record that the damage is gone, reruns nothing else.
rule cifar10_check:
    output:
        "results/data/cifar10-check.txt",
    log:
        "results/logs/data/cifar10-check.log",
    params:
        damage=lambda wc: cifar10_damage(),
    container:
        CPU_IMAGE
    shell:
        "printf '%s\\n' {params.damage:q} > {output} 2> {log}"


# The source is checked as its own step: Snakemake deletes a job's outputs before running it, so
# checking inside the cifar10 step would delete good prepared splits before a corrupt new source
# is refused. Snakemake deletes a failed job's outputs too, so the check's stamp is named for the
# source and shard count it vouches for (cifar10_source_stamp): a failed check removes only its own
# stamp, and runs again at every run while that source stays configured. The cifar10 step reads the
# source record, a copy of the configured source's stamp (cifar10_source_record) that only a passed
# check replaces, so after a failed check the record and the splits are as they were. While the
# splits' manifest says they came from the configured source, the step takes the record as
# ancient(): Snakemake then neither checks that source again nor reruns the step, so pointing the
# source back plans nothing (nor does a tree from before the per-source stamps). Another source
# (its stamp new, the step's params changed) reruns the data step once its check passes.
rule cifar10_source:
    output:
        cifar10_source_stamp(),
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


rule cifar10_source_record:
    input:
        rules.cifar10_source.output[0],
    output:
        "results/data/cifar10-source.json",
    log:
        "results/logs/data/cifar10-source-record.log",
    container:
        CPU_IMAGE
    shell:
        "cp {input} {output} 2> {log}"


rule cifar10:
    input:
        checked=lambda wc: newer_counts_if(not cifar10_source_prepared(), rules.cifar10_source_record.output[0]),
        damage=lambda wc: newer_counts_if(cifar10_damage(), rules.cifar10_check.output[0]),
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
