"""Compile every CUDA C source under src/repro/**/kernels/*.cu to a cubin for one GPU arch.

`python -m repro.build_kernels --out results/build/kernels [--arch sm_90]`

One .cu -> one <stem>.cubin plus <stem>.ptxas.log (the `-Xptxas -v` resource report: registers,
shared memory, spills). A manifest.json lists what was built, with source hashes. Without nvcc,
the manifest says so (status "nvcc-missing") and GPU steps that need a kernel fail with that
message; the rest of the DAG carries on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from repro.records import atomic_write_text

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent.parent
MANIFEST = "manifest.json"


def sources(root: Path = PACKAGE_DIR) -> list[Path]:
    return sorted(root.glob("**/kernels/*.cu"))


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release ([\d.]+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def ptxas_summary(log: str) -> list[dict]:
    """Per-kernel registers / spills / shared memory from a `-Xptxas -v` log."""
    rows, current = [], None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = {"kernel": m.group(1)}
            rows.append(current)
        elif current is not None and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                current["smem_bytes"] = int(s.group(1))
    return rows


def build(out_dir: Path, arch: str = "sm_90", nvcc: str | None = None, srcs: list[Path] | None = None) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nvcc = nvcc or shutil.which("nvcc")
    srcs = sources() if srcs is None else srcs
    manifest: dict = {"arch": arch, "kernels": {}}
    if nvcc is None:
        manifest.update(status="nvcc-missing", reason="nvcc not found on PATH: CUDA kernels were not built")
    else:
        manifest.update(status="built", nvcc=nvcc, nvcc_version=nvcc_version(nvcc))
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for stem, entry in pool.map(lambda s: _compile(s, out_dir, arch, nvcc), srcs):
                manifest["kernels"][stem] = entry
    atomic_write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def _compile(src: Path, out_dir: Path, arch: str, nvcc: str) -> tuple[str, dict]:
    """nvcc one .cu to a cubin; keep the -Xptxas -v report beside it."""
    cubin = out_dir / f"{src.stem}.cubin"
    tmp = cubin.with_suffix(".cubin.tmp")
    cmd = [nvcc, f"-arch={arch}", "-cubin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v",
           f"-I{src.parent}", "-o", str(tmp), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    atomic_write_text(out_dir / f"{src.stem}.ptxas.log", " ".join(cmd) + "\n" + log)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"nvcc failed on {src} (see {out_dir / (src.stem + '.ptxas.log')}):\n{log}")
    tmp.replace(cubin)
    spills = [r for r in ptxas_summary(log) if r.get("spill_stores") or r.get("spill_loads")]
    headers = sorted(src.parent.glob("*.cuh"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [src, *headers])).hexdigest()
    return src.stem, {
        "source": str(src.relative_to(ROOT)) if src.is_relative_to(ROOT) else str(src),
        "source_sha256": digest,
        "cubin": cubin.name,
        "entries": len(ptxas_summary(log)),
        "spilling_entries": [r["kernel"] for r in spills],
    }




def cubin_path(kernels_dir: Path, stem: str) -> Path:
    """The built cubin for kernels/<stem>.cu, or an error that says how to build it."""
    kernels_dir = Path(kernels_dir)
    manifest_path = kernels_dir / MANIFEST
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("status") != "built":
            raise FileNotFoundError(f"{stem}.cubin: {manifest.get('reason', 'kernels were not built')}")
    path = kernels_dir / f"{stem}.cubin"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: build the kernels first (`snakemake build_kernels`)")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/build/kernels"), help="output folder")
    ap.add_argument("--arch", default="sm_90", help="GPU architecture for nvcc -arch (default sm_90, Hopper)")
    args = ap.parse_args(argv)
    try:
        manifest = build(args.out, args.arch)
    except RuntimeError as exc:
        print(f"repro.build_kernels: error: {exc}", file=sys.stderr)
        return 1
    if manifest["status"] != "built":
        print(f"repro.build_kernels: {manifest['reason']}", file=sys.stderr)
    else:
        for stem, k in manifest["kernels"].items():
            warn = f" (spills in {k['spilling_entries']})" if k["spilling_entries"] else ""
            print(f"built {k['cubin']}: {k['entries']} kernels{warn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
