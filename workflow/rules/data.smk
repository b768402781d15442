# Dataset prep: CIFAR-10 from the JPEG shards, the official release or a local folder, into one
# checksummed array file per split that every training job reads.


rule cifar10:
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
