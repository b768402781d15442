# The rules that run experiments: `experiment`, any experiment file of any paper, and `sweep_point`,
# one point of any sweep (docs/adding-a-paper.md).


# One experiment file: its inputs, code, kernels and GPU count come from the file. A paper whose step
# differs (more outputs, say) writes a rule of its own in workflow/rules/<paper>.smk and puts it
# first with `ruleorder: <its rule> > experiment` (clicktrain.smk).
rule experiment:
    input:
        unpack(lambda wc: experiment_inputs(experiment_of(wc))),
    output:
        record="results/{experiment}/record.json",
    log:
        "results/logs/{experiment}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        experiment=layout.alternatives(EXPERIMENTS),
    resources:
        **step_resources(experiment_of),
    container:
        GPU_IMAGE
    shell:
        repro_run("{wildcards.experiment}")


# One point of a sweep: its experiment with the point's parameters (and seed), in the sweep's folder.
rule sweep_point:
    input:
        unpack(lambda wc: experiment_inputs(point_of(wc)["experiment"])),
    output:
        record="results/{paper}/{sweep}/{point}/record.json",
    log:
        "results/logs/{paper}/{sweep}/{point}.log",
    params:
        scale=SCALE,
        experiment=lambda wc: point_of(wc)["experiment"],
        overrides=lambda wc: point_of(wc)["overrides"],
    wildcard_constraints:
        **sweep.constraints(SWEEPS),
    resources:
        **step_resources(lambda wc: point_of(wc)["experiment"]),
    container:
        GPU_IMAGE
    shell:
        repro_run("{params.experiment}", out="results/{wildcards.paper}/{wildcards.sweep}/{wildcards.point}",
                  overrides="{params.overrides}")
