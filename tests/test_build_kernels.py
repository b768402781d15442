"""Kernel builds: nvcc for sm_90 where it exists (CI has nvcc 13.0), a clear record where not."""

import json
import shutil

import pytest

from repro import build_kernels

NVCC = shutil.which("nvcc")
SAMPLE = """
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def test_ptxas_summary_parses_registers_and_spills():
    log = ("ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
           "ptxas info    : Function properties for k1\n"
           "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 40 registers, 4096 bytes smem, 380 bytes cmem[0]\n")
    assert build_kernels.ptxas_summary(log) == [
        {"kernel": "k1", "spill_stores": 8, "spill_loads": 8, "registers": 40, "smem_bytes": 4096}]


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_builds_cubin_for_sm90(tmp_path):
    src = tmp_path / "kernels" / "axpy.cu"
    src.parent.mkdir()
    src.write_text(SAMPLE)
    manifest = build_kernels.build(tmp_path / "out", srcs=[src])
    assert manifest["status"] == "built" and manifest["kernels"]["axpy"]["entries"] == 1
    cubin = tmp_path / "out" / "axpy.cubin"
    assert cubin.stat().st_size > 0 and cubin.read_bytes()[:4] == b"\x7fELF"
    assert "Used" in (tmp_path / "out" / "axpy.ptxas.log").read_text()
    assert build_kernels.cubin_path(tmp_path / "out", "axpy") == cubin


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_compile_error_is_reported_and_leaves_no_cubin(tmp_path):
    src = tmp_path / "bad.cu"
    src.write_text("this is not CUDA")
    with pytest.raises(RuntimeError, match="nvcc failed on"):
        build_kernels.build(tmp_path / "out", srcs=[src])
    assert not list((tmp_path / "out").glob("*.cubin*"))


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_every_project_kernel_builds(tmp_path):
    manifest = build_kernels.build(tmp_path)
    assert manifest["status"] == "built"
    assert set(manifest["kernels"]) == {s.stem for s in build_kernels.sources()}
    assert all(not k["spilling_entries"] for k in manifest["kernels"].values()), manifest


def test_without_nvcc_the_manifest_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(build_kernels.shutil, "which", lambda _: None)
    manifest = build_kernels.build(tmp_path)
    assert manifest["status"] == "nvcc-missing"
    assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "nvcc-missing"
    with pytest.raises(FileNotFoundError, match="nvcc not found"):
        build_kernels.cubin_path(tmp_path, "anything")


def test_missing_cubin_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match="snakemake build_kernels"):
        build_kernels.cubin_path(tmp_path, "tsm2r")
