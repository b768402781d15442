#!/usr/bin/env bash
# Run Snakemake targets on an air-gapped GPU machine that has torch/CuPy but none of our
# pipeline packages, and pack what the run wrote for the trip back.
#
#   tools/gpu_run.sh [--out DIR] [--data DIR] [--models] [--checkpoints] [--timeout S] [--] [snakemake targets or options...]
#
# Expects: the wheelhouse in .whl/ (`make wheelhouse`), the CIFAR-10 shards in --data (default
# .device-data/cifar10-jpeg), REPRO_GIT_COMMIT/REPRO_GIT_DIRTY when the tree has no .git.
# Writes DIR/results.tar.gz (records, tables, figures, claims, logs, probe caches of unfinished
# runs; no models or MLflow store) and DIR/snakemake.log. --models adds the exported pruned models
# (results/**/pruned.pt, 1.9 MB each for ResNet-32, 60 MB for VGG-16), so that a later call can
# time them without retraining. --checkpoints adds the training checkpoints of runs the timeout cut
# (results/**/checkpoint*.pt; ResNet-32 about 2 MB, VGG-16 about 120 MB): carried back with
# `tools/device_tree.sh --keep`, a later call resumes them where they stopped. REPRO_GPU_JOBS=N
# lets N GPU jobs share the machine's GPUs (default: one job per GPU; speeds measured while
# sharing are shared-GPU speeds). --timeout S
# stops Snakemake after S seconds and still packs what finished (for machines lent by the call).
set -euo pipefail
out="${OUT:-/tmp/repro-out}"
data=".device-data/cifar10-jpeg"
models=()  # extra find patterns: pruned models, checkpoints
limit=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --models) models+=(-o -name pruned.pt); shift ;;
    --checkpoints) models+=(-o -name 'checkpoint*.pt'); shift ;;
    --timeout) limit="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
mkdir -p "$out"
source "$(dirname "$0")/gpu_env.sh"
status=0
# one GPU job per GPU; each job claims a free one (repro.gpu_slots)
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
timeout --kill-after=10 "$limit" python3 -m snakemake "$@" --cores "$(nproc)" --resources "gpu=${REPRO_GPU_JOBS:-${gpus:-1}}" --keep-going --rerun-incomplete \
  --config scale=paper "cifar10_source=shards:$data" 2>&1 | tee "$out/snakemake.log" || status=$?
# records, tables, figures, reports, logs and build reports only (no models, checkpoints, arrays)
find results -path results/reference -prune -o -type f \( -name '*.json' -o -name '*.csv' -o -name '*.png' \
  -o -name '*.pdf' -o -name '*.log' -o -name '*.html' -o -name '*.md' -o -name '*.yaml' -o -name '*.jsonl' ${models[@]+"${models[@]}"} \) -print \
  | tar -czf "$out/results.tar.gz" -T -
exit "$status"
