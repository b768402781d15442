#!/usr/bin/env bash
# Prepare the tree a lent GPU machine runs from: the committed HEAD (never the working tree, which
# helpers may be editing), without the reference results, plus the CIFAR-10 shards and anything a
# previous call left to continue (records, pruned models, probe caches).
#
#   tools/device_tree.sh [--shards DIR] [--keep PATH ...] [--root] [--no-shards]
#
# --root: no copy of the tree; the call runs from the repository root, which must be a clean
# checkout of HEAD (when tracked files + .whl + a copy would pass the 64 MiB carry limit).
# --no-shards: leave the CIFAR-10 shards out (calls that train nothing).
#
# Writes .device-data/clean (the tree; run there: `cd .device-data/clean && ln -sfn ../../.whl .whl
# && source tools/gpu_env.sh`), .device-data/cifar10-jpeg (the shards, default ../shared/data/
# cifar10-jpeg) and .device-data/commit.txt; export REPRO_GIT_COMMIT=$(cat .device-data/commit.txt)
# REPRO_GIT_DIRTY=0 for the call, and carry .whl and .device-data (64 MiB at most in all).
# --keep copies PATH (relative to results/ of an unpacked results.tar.gz, e.g.
# /tmp/call1/results/clicktrain/admm) into the tree's results/ at the same place; a published run
# (results/reference/<gpu>/clicktrain/clicktrain_budget/admm_e10) goes where the pipeline wrote it.
set -euo pipefail
cd "$(dirname "$0")/.."
shards=../shared/data/cifar10-jpeg
keep=(); root=0; shards_on=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --keep) keep+=("$2"); shift 2 ;;
    --root) root=1; shift ;;
    --no-shards) shards_on=0; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
git diff --quiet HEAD -- . ':!results/reference' 2>/dev/null || \
  echo "note: the working tree differs from HEAD; the device runs HEAD $(git rev-parse --short HEAD)" >&2
mkdir -p .device-data
git rev-parse HEAD > .device-data/commit.txt
rm -rf .device-data/clean
if (( root )); then
  git diff --quiet HEAD && [[ -z "$(git ls-files --others --exclude-standard)" ]] || \
    { echo "--root needs a clean checkout of HEAD (commit or stash first)" >&2; exit 2; }
  (( ${#keep[@]} == 0 )) || { echo "--keep needs the copied tree (drop --root)" >&2; exit 2; }
else
  mkdir -p .device-data/clean
  git archive HEAD | tar -x -C .device-data/clean
  rm -rf .device-data/clean/results/reference
fi
if (( ! shards_on )); then rm -rf .device-data/cifar10-jpeg
elif [[ ! -d .device-data/cifar10-jpeg ]]; then
  [[ -d "$shards" ]] || { echo "no CIFAR-10 shards at $shards (--shards DIR)" >&2; exit 2; }
  cp -r "$shards" .device-data/cifar10-jpeg
fi
for path in "${keep[@]}"; do
  rel="${path#*results/}"
  [[ "$rel" != "$path" ]] || { echo "--keep $path: not under a results/ folder" >&2; exit 2; }
  [[ "$rel" != reference/* ]] || rel="${rel#reference/*/}"  # a published run goes back where it ran
  mkdir -p ".device-data/clean/results/$(dirname "$rel")"
  cp -r "$path" ".device-data/clean/results/$rel"
done
du -sh .device-data .whl 2>/dev/null | sed 's/^/size: /'
echo "tree of $(cut -c1-7 .device-data/commit.txt) ready in $( ((root)) && echo "the repository root" || echo .device-data/clean)"
