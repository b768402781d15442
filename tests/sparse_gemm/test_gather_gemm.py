"""The Triton gather GEMM against an fp32 torch reference: on the CPU in Triton's interpreter on
small and odd shapes (not multiples of any tile), with NaN-poisoned outputs so an unwritten element
fails; the same checks at the benchmark's shapes on a GPU (gpu-marked). Also the interpreter's bf16
fix and the operand checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from repro.kernels import triton_interpreter as interpreter
from repro.papers.sparse_gemm import patterns
from repro.papers.sparse_gemm.packing import expand, pack
from repro.papers.sparse_gemm.tuner import tolerance

gg = pytest.importorskip("repro.papers.sparse_gemm.gather_gemm", reason="needs triton")

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SMALL = gg.Config(bm=32, bk=32, warps=4, stages=1)


def run_case(pattern, k, n, m, sparsity, width, dtype, device, config, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(k, n, generator=gen)
    layout = patterns.prune(pattern, {"w": w.abs()}, sparsity, tile=width, vector=width)["w"]
    assert patterns.check(layout) == []
    compact = pattern != "sbw"
    packed = pack(w, layout, width, compact, dtype=dtype).to(device)
    x = torch.randn(k, m, generator=gen).to(dtype).to(device)
    out = torch.full((packed.n_out, m), math.nan, dtype=dtype, device=device)
    gg.gather_gemm(x, packed, out, config)
    ref = ((w * layout.mask).to(dtype).float().t().to(device) @ x.float())
    full = expand(out, packed) if compact else out
    assert not bool(torch.isnan(full).any()), "unwritten outputs"
    err = (full.float() - ref).abs().max().item() / ref.abs().max().item()
    assert err <= tolerance(str(dtype).split(".")[1]), err
    return packed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern,width", [("tw", 32), ("sbw", 16), ("tvw", 32)])
@pytest.mark.parametrize("k,n,m,sparsity", [(70, 150, 45, 0.75), (64, 64, 64, 0.5), (33, 20, 7, 0.875)])
def test_interpreter_matches_reference(pattern, width, dtype, k, n, m, sparsity):
    if not interpreter.interpreting():
        pytest.skip("a GPU is present: the gpu-marked twin runs the compiled kernel")
    run_case(pattern, k, n, m, sparsity, width, dtype, "cpu", SMALL)


def test_a_group_with_more_rows_than_one_k_step():
    if not interpreter.interpreting():
        pytest.skip("interpreter only")
    packed = run_case("sbw", 200, 40, 9, 0.5, 16, torch.float16, "cpu", gg.Config(16, 32, 4, 1))
    assert int(packed.klen.max()) > 32  # several K steps, with a partial last one


@pytest.mark.parametrize("config", [gg.Config(32, 32, 4, 1, group_m=1), gg.Config(32, 32, 4, 1, group_m=3),
                                    gg.Config(16, 64, 4, 1, group_m=2, tma=True)], ids=lambda c: c.name)
@pytest.mark.parametrize("m", [96, 45])  # a multiple of bm (no M mask) and not
def test_program_orders_tma_and_even_m(config, m):
    """Every program order (super-rows of group_m m-blocks, a short last one), the TMA weight path,
    and both M paths write every output once and right."""
    if not interpreter.interpreting():
        pytest.skip("interpreter only")
    run_case("sbw", 150, 70, m, 0.75, 16, torch.float16, "cpu", config)


def test_identity_packing_is_the_dense_gemm():
    """The kernel-quality ceiling's packing: all of K for every column, so the gather GEMM computes
    W^T X itself."""
    k, n, m = 70, 40, 33
    gen = torch.Generator().manual_seed(1)
    w, x = torch.randn(k, n, generator=gen), torch.randn(k, m, generator=gen).half()
    layout = patterns.identity(k, n, tile=16)
    assert bool(layout.mask.all()) and patterns.check(layout) == []
    packed = pack(w, layout, 16, compact=True, dtype=torch.float16)
    assert packed.nnz == k * n and torch.equal(packed.y_cols, torch.arange(n))
    if interpreter.interpreting():
        out = gg.gather_gemm(x, packed, config=SMALL)
        ref = w.half().float().t() @ x.float()
        assert (out.float() - ref).abs().max().item() <= tolerance("float16") * ref.abs().max().item()
    with pytest.raises(ValueError, match="positive"):
        patterns.identity(0, 4)


def test_operands_are_checked_before_launch():
    w = torch.randn(40, 24)
    layout = patterns.tw({"w": w.abs()}, 0.75, tile=16)["w"]
    packed = pack(w, layout, 16, True, dtype=torch.float16)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        gg.gather_gemm(torch.randn(40, 8), packed)
    with pytest.raises(ValueError, match="bfloat16"):
        gg.gather_gemm(torch.randn(40, 8).bfloat16(), packed)
    with pytest.raises(ValueError, match=r"\(K=40, M\)"):
        gg.gather_gemm(torch.randn(41, 8).half(), packed)
    with pytest.raises(ValueError, match="row-major"):
        gg.gather_gemm(torch.randn(8, 40).half().t(), packed)
    with pytest.raises(ValueError, match="out must be"):
        gg.gather_gemm(torch.randn(40, 8).half(), packed, torch.empty(3, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="does not fit"):
        gg.gather_gemm(torch.randn(40, 8).half(), packed, config=gg.Config(bm=256, bk=256, warps=1, stages=9))


def test_bf16_fix_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.nan], dtype=np.float32)  # 1 + 2^-8 ties to 1
    bits = interpreter.f32_to_bf16_bits(x)
    back = interpreter.bf16_bits_to_f32(bits)
    want = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    assert np.array_equal(back[:4], want[:4]) and np.isnan(back[4])


def test_candidates_fit_their_width():
    assert gg.candidates(128) and all(c.fits(128) for c in gg.candidates(128))
    assert not gg.Config(256, 128, 4, 4).fits(128)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern,width", [("tw", 128), ("sbw", 64), ("tvw", 128)])
@pytest.mark.parametrize("m,k,n", [(12800, 768, 3072), (8192, 4096, 4096), (1000, 333, 777)])
def test_gpu_matches_reference_at_full_shapes(pattern, width, dtype, m, k, n):
    for config in gg.candidates(width):
        run_case(pattern, k, n, m, 0.75, width, dtype, "cuda", config)


@pytest.mark.gpu
@GPU
def test_gpu_tvw_on_cusparselt_matches_reference():
    from repro.papers.sparse_gemm import semi_structured
    from repro.papers.sparse_gemm.packing import unpack

    w = torch.randn(4096, 3072, device="cuda")
    layout = patterns.tvw({"w": w.abs().cpu()}, 0.75, tile=128)["w"]
    packed = pack(w.cpu(), layout, 128, True, dtype=torch.float16).to("cuda")
    x = torch.randn(4096, 2048, device="cuda").half()
    out = torch.full((packed.n_out, 2048), math.nan, dtype=torch.float16, device="cuda")
    semi_structured.TVW(packed)(x, out)
    ref = unpack(packed).float().t().cuda()[packed.y_cols.cuda()] @ x.float()
    assert (out.float() - ref).abs().max().item() / ref.abs().max().item() <= tolerance("float16")


def test_the_kernel_quality_benchmark_runs_and_records(tmp_path):
    """benchmarks/gather_gemm.py end to end (on a CPU: one tiny shape in the interpreter): every row
    has cuBLAS's time, the best configuration on the identity and TW packings, and the ratios."""
    import importlib.util
    import json
    from pathlib import Path

    if not interpreter.interpreting():
        pytest.skip("the GPU run is the benchmark itself")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gather_gemm.py"
    spec = importlib.util.spec_from_file_location("gather_gemm_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "gg.json"
    assert bench.main(["--out", str(out), "--repeats", "1"]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 1
    row = rows[0]
    for key in ("cublas_us", "identity_best_us", "tw_best_us", "ideal_us", "quality", "tw_frac_ideal"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["quality"] == pytest.approx(row["cublas_us"] / row["identity_best_us"])
    assert row["ideal_kn"] == [64, 64]  # 128 x 96 at 75 %: 64 and 48 round to one tile each
