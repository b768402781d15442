#!/usr/bin/env bash
# Run Snakemake targets on an air-gapped GPU machine that has torch/CuPy but none of our
# pipeline packages, and pack what the run wrote for the trip back.
#
#   tools/gpu_run.sh [--out DIR] [--data DIR] [--] [snakemake targets or options...]
#
# Expects: the wheelhouse in .whl/ (`make wheelhouse`), the CIFAR-10 shards in --data (default
# .device-data/cifar10-jpeg), REPRO_GIT_COMMIT/REPRO_GIT_DIRTY when the tree has no .git.
# Writes DIR/results.tar.gz (records, tables, figures, claims, logs; not the MLflow store) and
# DIR/snakemake.log.
set -euo pipefail
out="${OUT:-/tmp/repro-out}"
data=".device-data/cifar10-jpeg"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
mkdir -p "$out"
site=/tmp/repro-site
if [[ -d .whl ]] && ! python3 -c "import snakemake, hydra" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# the rules call `python`; some images only have python3
if ! command -v python >/dev/null; then
  mkdir -p /tmp/repro-bin && ln -sf "$(command -v python3)" /tmp/repro-bin/python
  export PATH="/tmp/repro-bin:$PATH"
fi
export PYTHONUNBUFFERED=1
status=0
python3 -m snakemake --cores "$(nproc)" --resources gpu=1 --keep-going --rerun-incomplete \
  --config scale=paper "cifar10_source=shards:$data" "$@" 2>&1 | tee "$out/snakemake.log" || status=$?
tar -czf "$out/results.tar.gz" --exclude='results/mlflow*' --exclude='results/reference' --exclude='results/data' \
  --exclude='*.cubin' results
exit "$status"
