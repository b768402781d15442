#!/usr/bin/env bash
# Install the wheelhouse (tools/wheelhouse.sh) with no network, on the GPU machine, and check it.
#
#   eval "$(tools/install_wheelhouse.sh [--dir DIR] [--target SITE])"
#       unpack every wheel of DIR (.whl/) into SITE (/tmp/repro-site) beside the image's own
#       packages; prints the `export PYTHONPATH=...` line that puts SITE first
#   tools/install_wheelhouse.sh [--dir DIR] --env
#       install into the active Python environment instead, letting pip resolve against what it
#       already has (fails, naming the package, where the image's version does not fit)
#
# Either way it then checks that every requirement of the installed packages is met (pip check)
# and that snakemake, hydra, omegaconf and the GPU steps' pyamg, pymetis, mtkahypar and graphblas import.
# Messages go to stderr, the export line to stdout.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

dir="$repo/.whl"
target=/tmp/repro-site
into_env=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --env) into_env=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install_wheelhouse.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
shopt -s nullglob
wheels=("$dir"/*.whl)
((${#wheels[@]})) || { echo "install_wheelhouse.sh: no wheels in $dir/ (run tools/wheelhouse.sh)" >&2; exit 1; }

if ((into_env)); then
  roots=(snakemake hydra-core omegaconf pyamg pymetis mtkahypar python-graphblas)
  compgen -G "$dir/mlflow-[0-9]*.whl" >/dev/null && roots+=(mlflow)
  python3 -m pip install -q --no-index --find-links "$dir" -c "$repo/containers/constraints.txt" "${roots[@]}" >&2
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$target" "${wheels[@]}" >&2
  export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
fi

# pip check covers the whole environment: keep the lines about a wheelhouse package, as the one
# that requires or as the one that does not fit ("... but you have NAME VERSION").
names=$(for w in "${wheels[@]}"; do basename "$w" | cut -d- -f1; done)
problems=$(python3 -m pip check 2>&1 | awk '
  function canon(s) { s = tolower(s); gsub(/[_.]+/, "-", s); return s }
  NR == FNR { ours[canon($1)] = 1; next }
  canon($1) in ours { print; next }
  match($0, /but you have [^ ]+/) && canon(substr($0, RSTART + 13, RLENGTH - 13)) in ours
' <(echo "$names") - || true)
if [[ -n $problems ]]; then
  echo "install_wheelhouse.sh: unmet requirements:" >&2
  echo "$problems" >&2
  exit 1
fi
python3 -c 'import snakemake, hydra, omegaconf, pyamg, pymetis, mtkahypar, graphblas' >&2
echo "installed ${#wheels[@]} wheels; snakemake $(python3 -m snakemake --version) imports" >&2
((into_env)) || echo "export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH}"
