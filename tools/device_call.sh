#!/usr/bin/env bash
# One call on a lent GPU machine, run there from the repository root of the carried tree:
# wheels (.whl/) into /tmp/site, CIFAR-10 prepared beside the kernel build when
# .device-data/prep_first exists (the build skipped when .device-data/no_build exists), then the plan's steps one after another under one deadline;
# records and logs packed into $OUT/results.tar.gz (logs under results/device-logs/: the device
# tool brings back only a few files).
#   tools/device_tree.sh && cp tools/device_call.sh .device-data/call.sh   (here; write the plan
#   into .device-data/PLAN; carry .whl and .device-data)
#   bash .device-data/call.sh PLAN DEADLINE_S                              (there)
# Resuming across calls: what .device-data/resume/ holds (a previous call's results/ subtree: stages
# of Context.stage, training checkpoints) is copied into results/ first; the packed results keep
# every training run's checkpoint.pt (other .pt files stay behind), so a run stopped by the deadline
# resumes in the next call from its last epoch (unpack, copy results/<paper>/<run> with its
# checkpoint.pt and stages/ into .device-data/resume/<paper>/<run>, repeat the plan line).
# PLAN lines: "run <experiment> [overrides...]" (scale=paper, alone) | "bgrun <experiment> ..." (in
# the background: at most about five training processes share one H200 usefully) | "wait" |
# "test <pytest args...>" (split on spaces: quotes are not honoured, use sh for -k "a or b") | "prep" | "bgprep" |
# "sh <command>" (through bash -c). Commit of the tree: .device-data/commit.txt;
# .device-data/only (stems, one line) limits the kernel build to those sources; a plan's own
# "# only: <stems>" line overrides it.
# PLAN is a file in .device-data or a path from the tree's root (tools/device_plans/next, committed);
# where PLAN.h100 or PLAN.h200 exists for the card the call got, that one runs: one command serves
# whichever card comes.
set -uo pipefail
plan="$1"; deadline=$(( $(date +%s) + $2 ))
# The carried tree is HEAD's copy in .device-data/clean, or, where that would not fit the carry
# limit, the repository root itself (a clean checkout of HEAD: tools/device_tree.sh --root).
root=$PWD; dd=$root/.device-data
if [[ -d $dd/clean ]]; then cd "$dd/clean"; fi
export REPRO_GIT_COMMIT=$(cat "$dd/commit.txt") REPRO_GIT_DIRTY=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site "$root"/.whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:/tmp/site
py3=$(command -v python3); mkdir -p /tmp/bin && rm -f /tmp/bin/python && printf '#!/bin/sh\nexec %s "$@"\n' "$py3" > /tmp/bin/python && chmod +x /tmp/bin/python && export PATH=/tmp/bin:$PATH  # a wrapper, not a symlink: a symlinked venv python loses its venv
[[ -d $dd/resume ]] && mkdir -p results && cp -r "$dd/resume/." results/
log=$OUT/log.txt; : > "$log"
echo "commit $REPRO_GIT_COMMIT start $(date -u +%T)" | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$log"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oi 'h[0-9]\{3\}' | head -1 | tr 'A-Z' 'a-z')
plan_file=  # the card's own plan first, in .device-data, then in the tree
for f in "$dd/$plan.$card" "$root/$plan.$card" "$dd/$plan" "$root/$plan"; do [[ -f $f ]] && { plan_file=$f; break; }; done
[[ -n $plan_file ]] || { echo "no plan $plan (looked in $dd and $root, with .$card)" | tee -a "$log"; exit 2; }
stems=$(sed -n 's/^# only: *//p' "$plan_file" | head -1)
[[ -z $stems && -f $dd/only ]] && stems=$(cat "$dd/only")
echo "plan $plan_file${stems:+ (kernels: $stems)}" | tee -a "$log"
t0=$(date +%s)
[[ -f $dd/prep_first ]] && { python -m repro.data.cifar10 --source shards:$dd/cifar10-jpeg --out results/data/cifar10 > "$OUT/prep.log" 2>&1 & }
if [[ -f $dd/no_build ]]; then wait; echo "build skipped (.device-data/no_build)" | tee -a "$log"  # runs that load no CUDA C kernel
else python -m repro.kernels.build --out results/build/kernels ${stems:+--only $stems} > "$OUT/build.log" 2>&1; brc=$?; wait; echo "build rc=$brc $(( $(date +%s)-t0 )) s" | tee -a "$log"; fi
export REPRO_KERNELS_DIR=$PWD/results/build/kernels
n=0
while read -r kind rest; do
  [[ -z "$kind" || "$kind" == \#* ]] && continue
  n=$((n+1)); left=$(( deadline - $(date +%s) ))
  if (( left < 15 )); then echo "SKIP (deadline) $kind $rest" | tee -a "$log"; continue; fi
  t=$(date +%s)
  case "$kind" in
    prep) timeout $left python -m repro.data.cifar10 --source shards:$dd/cifar10-jpeg --out results/data/cifar10 > "$OUT/step$n.log" 2>&1 ;;
    run)  exp=${rest%% *}; timeout $left python -m repro.pipeline.run experiment=$rest scale=paper > "$OUT/step$n.log" 2>&1 ;;
    test) timeout $left python -m pytest -q -p no:cacheprovider $rest > "$OUT/step$n.log" 2>&1 ;;
    bgrun) timeout $left python -m repro.pipeline.run experiment=$rest scale=paper > "$OUT/step$n.log" 2>&1 &
          echo "step$n started in background: $rest" >> "$log"; continue ;;
    bgprep) timeout $left python -m repro.data.cifar10 --source shards:$dd/cifar10-jpeg --out results/data/cifar10 > "$OUT/step$n.log" 2>&1 &
          echo "step$n prep started in background" >> "$log"; continue ;;
    wait) wait ;;
    sh)   timeout $left bash -c "$rest" > "$OUT/step$n.log" 2>&1 ;;
  esac
  rc=$?; echo "step$n rc=$rc $(( $(date +%s)-t )) s: $kind $rest" | tee -a "$log"; tail -3 "$OUT/step$n.log" | sed 's/^/    /' >> "$log"
done < "$plan_file"
wait
mkdir -p results/device-logs && cp "$OUT"/*.log "$OUT"/log.txt results/device-logs/ 2>/dev/null; rm -f "$OUT"/step*.log
find results -name '*.pt' ! -name checkpoint.pt > /tmp/pt-exclude  # model weights stay; checkpoints travel
tar --exclude='results/data' --exclude='results/reference' --exclude='results/build/kernels/*.cubin' \
    -X /tmp/pt-exclude -czf "$OUT/results.tar.gz" results
ls -la "$OUT/results.tar.gz" | tee -a "$log"
echo "end $(date -u +%T)" | tee -a "$log"
