# Kernel builds: each src/repro/<paper>/kernels/<stem>.cu -> results/build/kernels/<stem>.cubin
# (sm_90) and its status file <stem>.json, the file steps that load the cubin wait for.
KERNEL_SOURCES = layout.kernel_sources()


rule build_kernel:
    input:
        source=lambda wc: provenance.repo_path(KERNEL_SOURCES[wc.stem]),
        headers=lambda wc: [provenance.repo_path(h) for h in sorted(KERNEL_SOURCES[wc.stem].parent.glob("*.cuh"))],
    output:
        status="results/build/kernels/{stem}.json",
    log:
        "results/logs/build/{stem}.log",
    params:
        arch="sm_90",
    wildcard_constraints:
        stem="|".join(KERNEL_SOURCES) or "(?!)",
    container:
        GPU_IMAGE  # nvcc lives in the GPU image
    shell:
        "python -m repro.kernels.build --out results/build/kernels --arch {params.arch} --only {wildcards.stem} "
        "> {log} 2>&1"


# `snakemake build_kernels`: every kernel.
rule build_kernels:
    input:
        expand(rules.build_kernel.output.status, stem=KERNEL_SOURCES),
