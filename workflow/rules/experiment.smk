# The rules that run experiments: `experiment`, the template each paper's rule file uses, and
# `sweep_point`, one point of any sweep (docs/adding-a-paper.md).


# A template: each paper's rule file uses it as `use rule experiment as <paper> with:` and names its
# experiments in wildcard_constraints.
rule experiment:
    input:
        unpack(lambda wc: experiment_inputs(experiment_of(wc))),
    output:
        record="results/{paper}/{exp}/record.json",
    log:
        "results/logs/{paper}/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        paper="(?!)",
    resources:
        **step_resources(experiment_of),
    container:
        GPU_IMAGE
    shell:
        repro_run("{wildcards.paper}/{wildcards.exp}")


# One point of a sweep: its experiment with the point's parameters (and seed), in the sweep's folder.
rule sweep_point:
    input:
        unpack(lambda wc: experiment_inputs(point_of(wc).experiment)),
    output:
        record="results/{paper}/{sweep}/{point}/record.json",
    log:
        "results/logs/{paper}/{sweep}/{point}.log",
    params:
        scale=SCALE,
        experiment=lambda wc: point_of(wc).experiment,
        overrides=lambda wc: sweep.hydra_overrides(point_of(wc), SCALE),
    wildcard_constraints:
        **sweep.constraints(SWEEPS),
    resources:
        **step_resources(lambda wc: point_of(wc).experiment),
    container:
        GPU_IMAGE
    shell:
        repro_run("{params.experiment}", out="results/{wildcards.paper}/{wildcards.sweep}/{wildcards.point}",
                  overrides="{params.overrides}")
