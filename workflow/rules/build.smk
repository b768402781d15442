# Kernel builds: every src/repro/**/kernels/*.cu -> results/build/kernels/<stem>.cubin (sm_90).


rule build_kernels:
    input:
        sources=sorted(Path("src/repro").glob("**/kernels/*.cu")),
        headers=sorted(Path("src/repro").glob("**/kernels/*.cuh")),
    output:
        manifest="results/build/kernels/manifest.json",
    log:
        "results/logs/build_kernels.log",
    params:
        arch="sm_90",
    container:
        GPU_IMAGE  # nvcc lives in the GPU image
    shell:
        "python -m repro.build_kernels --out results/build/kernels --arch {params.arch} > {log} 2>&1"
