# Helpers shared by all rule files (the resolved scale, the one way to run an experiment).
import sys
from pathlib import Path

sys.path.insert(0, f"{workflow.basedir}/src")  # repro's light modules, without install
from repro import provenance
from repro.scale import resolve_scale

SCALE = resolve_scale(config["scale"])
# Step environments (containers/*.def, built with `apptainer build`); used with
# `snakemake --sdm apptainer`, ignored otherwise.
CPU_IMAGE = "containers/repro-cpu.sif"
GPU_IMAGE = "containers/repro-gpu.sif"


def experiment_config(experiment):
    """The Hydra experiment file of '<paper>/<name>' (an input: editing it reruns the step)."""
    return f"config/experiment/{experiment}.yaml"


def experiment_code(experiment):
    """The source files behind '<paper>/<name>': its entry module and every repro module that imports,
    read from the sources (the trainer, models and data modules too; figures and bookkeeping aside),
    and its paper's kernel sources: the files its record lists as provenance.code. An input of the
    step, so editing any of them reruns it, and nothing else does."""
    code = provenance.experiment_code(experiment)
    if code is None:
        raise ValueError(f"{experiment_config(experiment)}: no such experiment file, or it names no entry")
    return code


def code_of(pattern):
    """experiment_code where the experiment has wildcards, as in code_of("baseline/{exp}")."""
    return lambda wc: experiment_code(pattern.format(**dict(wc.items())))


def record(experiment):
    return f"results/{experiment}/record.json"


def repro_run(experiment, device="auto", out=None, overrides="", **inputs):
    """Shell command running one experiment through the Hydra CLI; inputs name -> path pattern
    (e.g. ceilings="{input.ceilings}"; names as in config/run.yaml's `inputs`). device="cpu" for
    steps that never touch the GPU, so they claim none on a multi-GPU machine. out: the run folder
    (default results/<experiment>) and overrides: extra Hydra overrides, for one point of a sweep."""
    named = "".join(f" inputs.{k}={v}" for k, v in inputs.items())
    return (
        f"python -m repro.run experiment={experiment} scale={SCALE} device={device} "
        f"out={out or f'results/{experiment}'}{overrides}{named} "
        "> {log} 2>&1"
    )


# Every experiment that has a figure: figure name -> "<paper>/<name>" (names are unique).
FIGURES = {
    Path(p).stem: f"{Path(p).parent.name}/{Path(p).stem}"
    for p in sorted(Path("config/experiment").glob("*/*.yaml"))
}


def figure_record(wildcards):
    if wildcards.name not in FIGURES:
        raise ValueError(f"no experiment named {wildcards.name!r}; figures: {sorted(FIGURES)}")
    return record(FIGURES[wildcards.name])
