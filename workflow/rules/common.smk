# Helpers for every rule file (the resolved scale; reading an experiment file); the rules that
# run experiments are in experiment.smk (docs/adding-a-paper.md).
import hashlib
import json
import os
import shlex
import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, f"{workflow.basedir}/src")  # repro's light modules, without install
from repro import layout, sweep
from repro.pipeline import dagcache, provenance, watchdog
from repro.pipeline.scale import gpu_count, resolve_scale
from repro.prepared import broken_splits, prepared_from

# The jobs watch this process: when Snakemake is killed, they stop (repro.pipeline.watchdog).
watchdog.export_workflow_pid()
SCALE = resolve_scale(config["scale"])
# Step environments (containers/*.def, built with `apptainer build`); used with
# `snakemake --sdm apptainer`, ignored otherwise.
CPU_IMAGE = "containers/repro-cpu.sif"
GPU_IMAGE = "containers/repro-gpu.sif"
# What the rules compute from config/, src/repro/ and the rule files alone, kept between Snakemake
# starts while those files stay as they were (repro.pipeline.dagcache: .cache/dag.json)
DAG_CACHE = dagcache.DagCache()
EXPERIMENTS = DAG_CACHE.get("experiments", layout.experiment_names)
# sweep experiment -> {point name: {"experiment": the experiment it runs, "overrides": its Hydra
# overrides}} for the points that run in the sweep's own folder
SWEEPS = DAG_CACHE.get(f"sweeps/{SCALE}", lambda: {
    e: {name: {"experiment": p.experiment, "overrides": sweep.hydra_overrides(p, SCALE)}
        for name, p in sweep.own_points(e, SCALE).items()}
    for e in EXPERIMENTS if sweep.is_sweep(e)})


def experiments_of(paper):
    """The paper's experiments, as '<paper>/<name>'."""
    return [e for e in EXPERIMENTS if layout.split(e)[0] == paper]


def experiment_inputs(experiment):
    """What a step running ``experiment`` reads, by name: its experiment file and the base files it
    builds on, the source files behind its entry (provenance.experiment_code: editing any of them
    reruns it, and nothing else does), its declared inputs, the cubins it loads and, for a sweep, its
    points' records (kept in DAG_CACHE)."""
    return DAG_CACHE.get(f"inputs/{SCALE}/{experiment}", lambda: _experiment_inputs(experiment))


def _experiment_inputs(experiment):
    found = {"cfg": [provenance.repo_path(p) for p in layout.experiment_files(experiment)],
             "code": provenance.experiment_code(experiment)}
    found.update({name: f"results/{path}" for name, path in layout.inputs(experiment).items()})
    found["kernels"] = expand(rules.build_kernel.output.status, stem=layout.kernels(experiment))
    if experiment in SWEEPS:
        found["points"] = list(sweep.needed_records(experiment, SCALE).values())
    return found


# How a job runs the two entry points that most jobs run (repro.figures, repro.pipeline.run): through
# the warm runner (repro.pipeline.warm: a per-user server with their imports loaded forks each job,
# which then starts in tens of milliseconds instead of importing for about 1.5 s). Its client runs
# the module cold, in its own process, inside a SLURM job or a container and with REPRO_WARM=0. The
# command stays the same either way: Snakemake reruns a job whose shell command changed.
PY_M = "python -m repro.pipeline.warm"


def repro_run(experiment, out=None, overrides=""):
    """Shell command running one experiment through the Hydra CLI; out: the run folder (default
    results/<experiment>); overrides: extra Hydra overrides (one point of a sweep). replace=true: the
    workflow owns the folder and reruns a step exactly when its config or code changed, so its run
    may replace a record of another configuration there (a hand run may not: repro.pipeline.run refuses it)."""
    return (f"{PY_M} repro.pipeline.run experiment={experiment} scale={SCALE} "
            f"out={out or f'results/{experiment}'} replace=true{overrides} > {{log}} 2>&1")


# What a step asks a cluster for, by whether its experiment uses GPUs (profiles/slurm sends these to
# SLURM; a local run ignores them). Partitions and the GPU model come from the environment
# (docs/clusters.md), so that a new paper's rules need no profile entry.
STEP_RESOURCES = {
    "cpu": dict(slurm_partition=os.environ.get("REPRO_SLURM_PARTITION", ""), runtime=30, mem_mb=8000, cpus_per_task=2),
    "gpu": dict(slurm_partition=os.environ.get("REPRO_SLURM_GPU_PARTITION", ""),
                gpu_model=os.environ.get("REPRO_SLURM_GPU_MODEL", ""), runtime=60, mem_mb=32000, cpus_per_task=8),
}


def step_resources(experiment_of_job):
    """A rule's resources: the GPUs its experiment uses (step_gpus: ``--resources gpu=N`` caps them;
    the SLURM executor asks for them) and STEP_RESOURCES of its kind. ``experiment_of_job(wildcards)``
    names the experiment a job runs."""

    def kind(wc):
        return "gpu" if experiment_gpus(experiment_of_job(wc)) else "cpu"

    keys = sorted({k for r in STEP_RESOURCES.values() for k in r})
    return {"gpu": lambda wc: step_gpus(experiment_of_job(wc)),
            **{k: (lambda wc, k=k: STEP_RESOURCES[kind(wc)].get(k, "")) for k in keys}}


def experiment_gpus(experiment):
    """The GPUs the experiment file declares (layout.gpus; kept in DAG_CACHE)."""
    return DAG_CACHE.get(f"gpus/{experiment}", lambda: layout.gpus(experiment))


@cache
def gpus_here():
    """CUDA GPUs on this machine (nvidia-smi; asked once per Snakemake start)."""
    return gpu_count()


def step_gpus(experiment):
    """The GPUs a step of ``experiment`` holds (its `gpu` resource): the experiment file's count, except
    for a smoke-scale run on this machine when it has no GPU. There every step runs on the CPU
    (repro.pipeline.run's gpu_plan: its CPU path, or skipped), so holding the one `gpu` slot of the
    default profile would only make the GPU-declaring steps wait for each other on an idle core. On a
    cluster (a non-local executor) the count stands: the compute nodes are not this machine."""
    declared = experiment_gpus(experiment)
    if SCALE == "smoke" and workflow.local_exec and not gpus_here():
        return 0
    return declared


def experiment_of(wc):
    """The experiment an experiment job runs ('<paper>/<name>')."""
    return wc.experiment


def point_of(wc):
    """The sweep point a sweep_point job runs (SWEEPS' entry: its experiment and overrides)."""
    return SWEEPS[f"{wc.paper}/{wc.sweep}"][wc.point]


@cache
def cifar10_damage():
    """Why the prepared CIFAR-10 splits no longer match their manifest ([] when they do, or when none
    are prepared yet): read once while the DAG is built, and said on stderr (data.smk)."""
    prepared = os.path.dirname(rules.cifar10.output.manifest)
    problems = broken_splits(prepared)
    if problems:
        print(f"repro: {prepared} is damaged ({'; '.join(problems)}): the cifar10 step reruns", file=sys.stderr)
    return problems


def cifar10_source_stamp():
    """The cifar10_source check's stamp: one file per source and train-shard count (the config's
    ``cifar10_source`` and ``cifar10_train_shards`` at this scale), so that a failed check of one
    source deletes no other source's stamp (data.smk)."""
    spec = [config["cifar10_source"], config["cifar10_train_shards"][SCALE] or 5]
    return f"results/data/cifar10-source/{hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]}.json"


@cache
def cifar10_source_prepared():
    """Whether the prepared CIFAR-10 splits came from the configured source and shard count (their
    manifest says so): read once while the DAG is built (data.smk)."""
    return prepared_from(os.path.dirname(rules.cifar10.output.manifest), config["cifar10_source"],
                         config["cifar10_train_shards"][SCALE] or 5)


def newer_counts_if(condition, path):
    """``path`` as an input whose modification time reruns the step only while ``condition`` holds
    (ancient() otherwise); the set of input files is the same either way, so switching reruns nothing."""
    return path if condition else ancient(path)


@cache
def claims_of_experiments():
    """experiment -> the ids of the ledger's claims that read its record (as their metric or one of
    their `also` conditions), in ledger order."""
    found = {}
    for path in layout.claims_files():
        for claim in layout.load_yaml(path.read_text()).get("claims") or []:
            for cond in [claim.get("metric"), *(claim.get("also") or [])]:
                ids = found.setdefault(cond["experiment"], []) if cond else None
                if ids is not None and claim["id"] not in ids:
                    ids.append(claim["id"])
    return found


# Snakemake's report (`snakemake --report report.html`): a figure's place and columns there, evaluated
# only when the report is made (so they rerun nothing).
def report_paper(wc):
    """The report category of a figure job: its paper."""
    return layout.split(wc.experiment)[0]


def report_experiment(wc):
    """The report subcategory of a figure job: its experiment's name within the paper."""
    return layout.split(wc.experiment)[1]


def report_labels(wc):
    """The report columns of a figure: its experiment and the claims that read its record."""
    return {"experiment": wc.experiment, "claims": ", ".join(claims_of_experiments().get(wc.experiment, [])) or "-"}
