#!/usr/bin/env bash
# Run Snakemake targets on an air-gapped GPU machine that has torch/CuPy but none of our
# pipeline packages, and pack what the run wrote for the trip back.
#
#   tools/gpu_run.sh [--out DIR] [--data DIR] [--models] [--checkpoints] [--timeout S] [--] [snakemake targets or options...]
#
# Expects: the wheelhouse in .whl/ (`make wheelhouse`), the CIFAR-10 shards in --data (default
# .device-data/cifar10-jpeg), REPRO_GIT_COMMIT/REPRO_GIT_DIRTY when the tree has no .git.
# Writes DIR/results.tar.gz (records, tables, figures, claims, logs, probe caches of unfinished
# runs; no models or MLflow store) and DIR/snakemake.log. --models packs the exported pruned models
# (results/**/pruned.pt: ResNet-32 about 2.3 MB each, VGG-16 about 74 MB) apart, so that a later
# call can time them without retraining; --checkpoints packs the training checkpoints of runs the
# timeout cut (results/**/checkpoint*.pt; ResNet-32 about 2 MB, VGG-16 about 120 MB) with them:
# carried back with `tools/device_tree.sh --keep`, a later call resumes them where they stopped.
# Those go to DIR/models.tar.gz.part-aa, -ab, ... of 15 MiB each (`cat DIR/models.tar.gz.part-* |
# tar -xz` unpacks them), so that records never travel in one file with models: a lent machine
# returns files of at most 16 MiB (and 64 MiB, 8 files in all), and what does not fit is dropped. REPRO_GPU_JOBS=N
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
# one GPU job per GPU; each job claims a free one (repro.pipeline.gpu_slots)
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
timeout --kill-after=10 "$limit" python3 -m snakemake "$@" --cores "$(nproc)" --resources "gpu=${REPRO_GPU_JOBS:-${gpus:-1}}" --keep-going --rerun-incomplete \
  --config scale=paper "cifar10_source=shards:$data" 2>&1 | tee "$out/snakemake.log" || status=$?
# records, tables, figures, reports, logs and build reports only (no models, checkpoints, arrays)
find results -path results/reference -prune -o -type f \( -name '*.json' -o -name '*.csv' -o -name '*.png' \
  -o -name '*.pdf' -o -name '*.log' -o -name '*.html' -o -name '*.md' -o -name '*.yaml' -o -name '*.jsonl' \) -print \
  | tar -czf "$out/results.tar.gz" -T -
if [[ ${#models[@]} -gt 0 ]]; then  # models and checkpoints apart, in parts a lent machine can return
  find results -path results/reference -prune -o -type f \( -false ${models[@]} \) -print > "$out/models.txt"
  if [[ -s "$out/models.txt" ]]; then
    tar -czf - -T "$out/models.txt" | split -b 15M - "$out/models.tar.gz.part-"
    parts=$(ls "$out"/models.tar.gz.part-* | wc -l)
    echo "models: $(wc -l < "$out/models.txt") files in $parts part(s) of 15 MiB, $(du -ch "$out"/models.tar.gz.part-* | tail -1 | cut -f1) in all" >&2
    (( parts <= 6 )) || echo "warning: $parts parts exceed what a lent machine returns (8 files, 64 MiB); results.tar.gz still holds every record" >&2
  fi
fi
exit "$status"
