# SuperNeurons arm (A1): the dynamic GPU memory runtime's peak memory per network, the deepest
# ResNet each arm trains under a 12 GiB cap, the largest batch per network under that cap, and
# throughput (which reads the depth record for the checkpointing arm's maximum depth). Synthetic
# data: no dataset step needed.


rule superneurons:
    input:
        cfg=experiment_config("superneurons/{exp}"),
        code=code_of("superneurons/{exp}"),
    output:
        record=record("superneurons/{exp}"),
    log:
        "results/logs/superneurons/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        exp="peak_memory|depth|max_batch",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("superneurons/{wildcards.exp}")


rule superneurons_throughput:
    input:
        cfg=experiment_config("superneurons/throughput"),
        code=experiment_code("superneurons/throughput"),
        depth=expand(rules.superneurons.output.record, exp="depth"),
    output:
        record=record("superneurons/throughput"),
    log:
        "results/logs/superneurons/throughput.log",
    params:
        scale=SCALE,
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("superneurons/throughput", depth="{input.depth}")
