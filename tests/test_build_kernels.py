"""Kernel builds: nvcc for sm_90 where it exists (CI has nvcc 13.0), a clear record where not."""

import json
import shutil

import pytest

from repro.kernels import build as build_kernels

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
def test_a_rebuild_of_unchanged_sources_comes_from_the_cache_and_an_edit_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_BUILD_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "kernels" / "axpy.cu"
    src.parent.mkdir()
    src.write_text(SAMPLE)
    first = build_kernels.build(tmp_path / "a", srcs=[src])["kernels"]["axpy"]
    again = build_kernels.build(tmp_path / "b", srcs=[src])["kernels"]["axpy"]
    assert not first["from_cache"] and again["from_cache"]
    assert (tmp_path / "a" / "axpy.cubin").read_bytes() == (tmp_path / "b" / "axpy.cubin").read_bytes()
    src.write_text(SAMPLE.replace("a * x[i]", "a * x[i] * 2.0f"))
    assert not build_kernels.build(tmp_path / "c", srcs=[src])["kernels"]["axpy"]["from_cache"]


def test_only_builds_the_named_kernel_and_refuses_an_unknown_one(tmp_path, monkeypatch):
    monkeypatch.setattr(build_kernels.shutil, "which", lambda _: None)
    assert build_kernels.main(["--out", str(tmp_path), "--only", "tsm2r"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["tsm2r.json"]
    assert build_kernels.main(["--out", str(tmp_path), "--only", "nosuch"]) == 2


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


def test_without_nvcc_each_status_file_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(build_kernels.shutil, "which", lambda _: None)
    manifest = build_kernels.build(tmp_path)
    assert manifest["status"] == "nvcc-missing"
    assert json.loads((tmp_path / "tsm2r.json").read_text())["status"] == "nvcc-missing"
    with pytest.raises(FileNotFoundError, match="nvcc not found"):
        build_kernels.cubin_path(tmp_path, "tsm2r")


def test_missing_cubin_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match="snakemake build_kernels"):
        build_kernels.cubin_path(tmp_path, "tsm2r")
