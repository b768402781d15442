#!/usr/bin/env bash
# Wheels of the Python packages that the GPU machine's image lacks, for air-gapped machines
# (CPython 3.12, manylinux x86_64), then their total size.
#
#   tools/wheelhouse.sh [--dir DIR] [--with-mlflow] [--lean | --steps [--no-graphblas] [--skip A,B]]
#                                                               download the locked set into DIR (.whl/)
#   tools/wheelhouse.sh --relock                               recompute the lock (python3.12 + network)
#
# --lean leaves out pulp (16 MiB; Snakemake imports it only for its ILP scheduler and falls back to
# the greedy one without it) and pysz (8.5 MiB; only comet/comet_sz3 needs it): for device calls
# whose transfer is capped (tracked files + wheels + data <= 64 MiB).
# --steps keeps only what the GPU steps import and what that needs (STEPS below: no Snakemake, so the
# plans of tools/device_call.sh, which call `python -m repro.pipeline.run` directly), 27 MiB; with
# --no-graphblas also without python-graphblas and its SuiteSparse build (18 MiB; only tsparse/spgemm's
# CPU baseline imports it, and reports NaN with the reason when it is absent), 9 MiB; --skip drops
# more by name (mtkahypar, 6 MiB: only gpucache/reorder): what leaves room for the CIFAR-10 shards
# (18 MiB) beside the tracked files (about 36 MiB).
#
# The set is the dependency closure of ROOTS (below: the pipeline's own packages and what the GPU
# steps import beyond the image) at the pins in containers/constraints.txt, minus the packages that
# the H200 image already has (IMAGE below); tests/test_wheelhouse.py checks that it covers every
# third-party import of the GPU experiments' code.
# tools/wheelhouse.txt locks it, every version; tools/wheelhouse-mlflow.txt adds what mlflow
# needs on top (--with-mlflow). A lock line marked '# sdist' has no wheel on PyPI: it is built
# here with `pip wheel` and must come out pure Python. DIR ends up holding exactly the selected
# wheels (others are removed). Install them there with tools/install_wheelhouse.sh.
set -euo pipefail

dir=.whl
with_mlflow=0
relock=0
lean=0
steps=0
graphblas=1
skip=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --with-mlflow) with_mlflow=1; shift ;;
    --relock) relock=1; shift ;;
    --lean) lean=1; shift ;;
    --steps) steps=1; shift ;;
    --no-graphblas) graphblas=0; shift ;;
    --skip) skip="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "wheelhouse.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
dir="$(realpath -m "$dir")"
cd "$(dirname "$0")/.."

CONSTRAINTS=containers/constraints.txt
LOCK=tools/wheelhouse.txt
LOCK_MLFLOW=tools/wheelhouse-mlflow.txt
# pysz: SZ3, the comet_sz3 reference (CPU); pyamg, pymetis, mtkahypar, simpy: imported by the GPU
# steps sptrsv/* (pyamg's matrices), gpucache/reorder (its partitions) and caramel/timelines (the
# caramel package's SimPy model); python-graphblas: SuiteSparse:GraphBLAS, tsparse/spgemm's CPU baseline
ROOTS=(snakemake hydra-core omegaconf pysz pyamg pymetis mtkahypar simpy python-graphblas)
# --steps: the packages of ROOTS but Snakemake (and pysz, CPU-only) and their locked dependencies
# (tests/test_wheelhouse.py checks that this covers the GPU steps' imports and their dependencies)
STEPS=(hydra-core omegaconf antlr4-python3-runtime pyamg pymetis mtkahypar simpy python-graphblas
       suitesparse-graphblas donfig cffi pycparser)
GRAPHBLAS=(python-graphblas suitesparse-graphblas donfig cffi pycparser)
# The GPU machine's Python is 3.12.3, Ubuntu 24.04's (glibc 2.39; glibc not read there): wheels
# for manylinux up to 2_34 (cryptography's) are assumed to load.
TARGET=(--python-version 3.12 --implementation cp
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
BUDGET_MIB=60  # one device call carries at most 64 MiB, the repository included

# What the H200 image ('cuda') has, from the device docs' KINDS.md, read there on 2026-11-17.
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp"

relock() {
  local py="${PYTHON312:-python3.12}"
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
    || { echo "wheelhouse.sh --relock: needs a CPython 3.12 ('$py'; set PYTHON312)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  resolve() {  # resolve REPORT REQS...: what pip would install on a bare Python 3.12
    local report="$1"; shift
    "$py" -m pip install -q --dry-run --ignore-installed --target "$tmp/site" --report "$report" \
      -c "$CONSTRAINTS" "$@"
  }
  # Resolve everything together first, so the base set and mlflow's extra agree on versions.
  resolve "$tmp/all.json" "${ROOTS[@]}" mlflow
  python3 - "$tmp/all.json" >"$tmp/all.txt" <<'PY'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(f'{item["metadata"]["name"]}=={item["metadata"]["version"]}')
PY
  resolve "$tmp/base.json" -c "$tmp/all.txt" "${ROOTS[@]}"
  python3 - "$tmp/base.json" "$tmp/all.json" "$LOCK" "$LOCK_MLFLOW" "$IMAGE" "${ROOTS[*]}" <<'PY'
import json, re, sys
base_report, all_report, lock, lock_mlflow, image, roots = sys.argv[1:]
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
image = {canon(n) for n in image.split()}

def entries(report):
    out = {}
    for item in json.load(open(report))["install"]:
        name = canon(item["metadata"]["name"])
        sdist = not item["download_info"]["url"].endswith(".whl")
        out[name] = f'{name}=={item["metadata"]["version"]}' + ("  # sdist" if sdist else "")
    return out

base, everything = entries(base_report), entries(all_report)
header = ("# Generated by `tools/wheelhouse.sh --relock` from containers/constraints.txt: the closure\n"
          "# of {what},\n# minus the H200 image's packages. Do not edit by hand.\n")
for path, names, what in ((lock, base.keys() - image, ", ".join(roots.split())),
                          (lock_mlflow, everything.keys() - base.keys() - image,
                           "mlflow, beyond tools/wheelhouse.txt")):
    with open(path, "w") as f:
        f.write(header.format(what=what) + "".join(everything[n] + "\n" for n in sorted(names)))
    print(f"{path}: {len(names)} packages", file=sys.stderr)
PY
}

if ((relock)); then
  relock
  exit 0
fi

locks=("$LOCK")
((with_mlflow)) && locks+=("$LOCK_MLFLOW")
reqs() {  # reqs wheel|sdist: the selected lock lines of that kind, as name==version
  local kind="$1"
  grep -hv '^#' "${locks[@]}" | { if [[ $kind == sdist ]]; then grep '# sdist'; else grep -v '# sdist'; fi; } \
    | sed 's/ *#.*//' | grep . | { if ((lean)); then grep -Ev '^(pulp|pysz)=='; else cat; fi; } \
    | { if ((steps)); then grep -E "^($(IFS='|'; echo "${STEPS[*]}"))=="; else cat; fi; } \
    | { if ((!graphblas)); then grep -Ev "^($(IFS='|'; echo "${GRAPHBLAS[*]}"))=="; else cat; fi; } \
    | { if [[ -n $skip ]]; then grep -Ev "^(${skip//,/|})=="; else cat; fi; } || true
}

mkdir -p "$dir"
mapfile -t wheels < <(reqs wheel)
mapfile -t sdists < <(reqs sdist)
python3 -m pip download -q --no-deps --only-binary=:all: "${TARGET[@]}" -d "$dir" "${wheels[@]}"
for req in "${sdists[@]}"; do
  python3 -m pip wheel -q --no-deps -w "$dir" "$req"
done

# Check DIR against the selection (one wheel per package, the locked version, sdist builds pure),
# drop wheels that are not in it, and report the sizes.
python3 - "$dir" "$BUDGET_MIB" "${wheels[@]}" "${sdists[@]/%/ sdist}" <<'PY'
import os, re, sys
folder, budget, selected = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
want = {}  # name -> (version, built from sdist)
for line in selected:
    req, _, kind = line.partition(" ")
    name, version = req.split("==")
    want[canon(name)] = (version, kind == "sdist")

found, errors = {}, []
for fn in sorted(os.listdir(folder)):
    if not fn.endswith(".whl"):
        continue
    name, version, *_, abi, plat = fn[:-4].split("-")
    name = canon(name)
    if name not in want or want[name][0] != version:
        os.remove(os.path.join(folder, fn))
        print(f"removed {fn} (not in the selection)", file=sys.stderr)
        continue
    if want[name][1] and (abi, plat) != ("none", "any"):
        errors.append(f"{fn}: built from an sdist but not pure Python")
    found[name] = (fn, os.path.getsize(os.path.join(folder, fn)))
errors += [f"{n}=={v} missing from {folder}" for n, (v, _) in want.items() if n not in found]
if errors:
    sys.exit("wheelhouse.sh: " + "; ".join(errors))

total = sum(size for _, size in found.values())
binary = sorted(n for n, (fn, _) in found.items() if not fn.endswith("-none-any.whl"))
for fn, size in sorted(found.values(), key=lambda x: -x[1]):
    print(f"{size / 2**20:8.2f} MiB  {fn}")
print(f"{len(found)} wheels; binary (cp312 or abi3, manylinux x86_64): {', '.join(binary) or 'none'}")
print(f"total {total / 2**20:.1f} MiB in {folder}/ (budget {budget:.0f} MiB)")
if total > budget * 2**20:
    print(f"warning: over the {budget:.0f} MiB budget for one device call", file=sys.stderr)
PY
