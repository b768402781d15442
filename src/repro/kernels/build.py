"""Compile the CUDA C sources (src/repro/papers/<paper>/kernels/<stem>.cu) to cubins for one GPU arch.

`python -m repro.kernels.build --out results/build/kernels [--arch sm_90] [--only STEM ...]`

One .cu -> ``<stem>.cubin``, ``<stem>.ptxas.log`` (the `-Xptxas -v` resource report: registers,
shared memory, spills) and ``<stem>.json`` (status, source digest, kernels, spills): the file the
workflow tracks, one per kernel source, so that editing one paper's kernel rebuilds that cubin and
reruns only the steps that load it. Without nvcc each ``<stem>.json`` says so (status
"nvcc-missing") and GPU steps that need the kernel fail with that message; the rest of the DAG
carries on. Builds are cached outside results/ by digest of the sources, headers, arch, flags and
nvcc version (``$REPRO_BUILD_CACHE``, default ``.cache/kernels`` in the repository), so a clean
results folder, or an edit undone, costs no compile.
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

from repro.faults import kill_point
from repro.layout import PAPERS_ROOT, kernel_sources
from repro.records import atomic_write_text

ROOT = PAPERS_ROOT.parents[2]  # the repository


def sources(root: Path = PAPERS_ROOT) -> list[Path]:
    """Every kernel source (src/repro/papers/<paper>/kernels/<stem>.cu), stems unique."""
    return sorted(kernel_sources(root).values())


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


FLAGS = ("-cubin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v")


def cache_dir() -> Path:
    return Path(os.environ.get("REPRO_BUILD_CACHE") or ROOT / ".cache" / "kernels")


def source_sha256(src: Path) -> str:
    """Digest of a kernel source and the headers beside it (what its cubin depends on)."""
    headers = sorted(src.parent.glob("*.cuh"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in [src, *headers])).hexdigest()


def build(out_dir: Path, arch: str = "sm_90", nvcc: str | None = None, srcs: list[Path] | None = None) -> dict:
    """Build ``srcs`` (default every kernel source) into ``out_dir``; returns
    {"status", "reason"?, "kernels": {stem: status entry}} and writes each ``<stem>.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nvcc = nvcc or shutil.which("nvcc")
    srcs = sources() if srcs is None else srcs
    summary: dict = {"arch": arch, "kernels": {}}
    if nvcc is None:
        summary.update(status="nvcc-missing", reason="nvcc not found on PATH: CUDA kernels were not built")
        for src in srcs:
            summary["kernels"][src.stem] = {"status": "nvcc-missing", "reason": summary["reason"], "arch": arch}
    else:
        summary.update(status="built", nvcc=nvcc, nvcc_version=nvcc_version(nvcc))
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for stem, entry in pool.map(lambda s: _compile(s, out_dir, arch, nvcc, summary["nvcc_version"]), srcs):
                summary["kernels"][stem] = entry
    kill_point("build.compiled")
    for stem, entry in summary["kernels"].items():
        atomic_write_text(out_dir / f"{stem}.json", json.dumps(entry, indent=2) + "\n")
    return summary


def _compile(src: Path, out_dir: Path, arch: str, nvcc: str, version: str) -> tuple[str, dict]:
    """nvcc one .cu to a cubin (or take it from the build cache); keep the -Xptxas -v report beside it."""
    cubin, log_path = out_dir / f"{src.stem}.cubin", out_dir / f"{src.stem}.ptxas.log"
    digest = source_sha256(src)
    key = hashlib.sha256(f"{digest} {arch} {version} {' '.join(FLAGS)}".encode()).hexdigest()[:24]
    cached, cached_log = cache_dir() / f"{src.stem}-{key}.cubin", cache_dir() / f"{src.stem}-{key}.ptxas.log"
    if cached.is_file() and cached_log.is_file():
        log = cached_log.read_text()
        shutil.copyfile(cached_log, log_path)
        tmp = cubin.with_suffix(".cubin.tmp")
        shutil.copyfile(cached, tmp)
        tmp.replace(cubin)
        from_cache = True
    else:
        cmd = [nvcc, f"-arch={arch}", *FLAGS, f"-I{src.parent}", "-o", str(cubin.with_suffix(".cubin.tmp")), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
        atomic_write_text(log_path, log)
        if proc.returncode != 0:
            cubin.with_suffix(".cubin.tmp").unlink(missing_ok=True)
            raise RuntimeError(f"nvcc failed on {src} (see {log_path}):\n{log}")
        cubin.with_suffix(".cubin.tmp").replace(cubin)
        cache_dir().mkdir(parents=True, exist_ok=True)
        for made, dest in ((cubin, cached), (log_path, cached_log)):
            tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
            shutil.copyfile(made, tmp)
            tmp.replace(dest)
        from_cache = False
    spills = [r for r in ptxas_summary(log) if r.get("spill_stores") or r.get("spill_loads")]
    return src.stem, {
        "status": "built",
        "arch": arch,
        "nvcc_version": version,
        "flags": " ".join(FLAGS),
        "source": str(src.relative_to(ROOT)) if src.is_relative_to(ROOT) else str(src),
        "source_sha256": digest,
        "cubin": cubin.name,
        "from_cache": from_cache,
        "entries": len(ptxas_summary(log)),
        "spilling_entries": [r["kernel"] for r in spills],
    }


def cubin_path(kernels_dir: Path, stem: str) -> Path:
    """The built cubin for kernels/<stem>.cu, or an error that says how to build it."""
    kernels_dir = Path(kernels_dir)
    status_path = kernels_dir / f"{stem}.json"
    if status_path.exists():
        status = json.loads(status_path.read_text())
        if status.get("status") != "built":
            raise FileNotFoundError(f"{stem}.cubin: {status.get('reason', 'the kernel was not built')}")
    path = kernels_dir / f"{stem}.cubin"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: build the kernels first (`snakemake build_kernels`)")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/build/kernels"), help="output folder")
    ap.add_argument("--arch", default="sm_90", help="GPU architecture for nvcc -arch (default sm_90, Hopper)")
    ap.add_argument("--only", nargs="+", metavar="STEM", help="build these kernel sources only (default: all)")
    args = ap.parse_args(argv)
    known = {s.stem: s for s in sources()}
    if args.only and (unknown := sorted(set(args.only) - set(known))):
        print(f"repro.kernels.build: error: no kernel source {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    try:
        summary = build(args.out, args.arch, srcs=[known[s] for s in args.only] if args.only else None)
    except RuntimeError as exc:
        print(f"repro.kernels.build: error: {exc}", file=sys.stderr)
        return 1
    if summary["status"] != "built":
        print(f"repro.kernels.build: {summary['reason']}", file=sys.stderr)
    else:
        for stem, k in summary["kernels"].items():
            warn = f" (spills in {k['spilling_entries']})" if k["spilling_entries"] else ""
            print(f"built {k['cubin']}: {k['entries']} kernels{warn}" + (" (from the build cache)" if k["from_cache"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
