"""TSM2X on a GPU: every kernel variant against an fp64 reference on odd shapes, outputs poisoned
with NaN first, torch and CuPy operands, streams, the dispatcher and a tiny end-to-end benchmark.

Kernels come from $REPRO_KERNELS_DIR (a `snakemake build_kernels` output) or are compiled here
with nvcc into a temporary folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

from repro.experiment import Context  # noqa: E402
from repro.papers.tsm2x import experiment as bench, figures, tsm2  # noqa: E402
from repro.papers.tsm2x.tuner import (  # noqa: E402
    CUBLAS, DISPATCH_MARGIN, REGIMES, Tuner, cublas_call, dispatch, gpu_name, matmul, native_route)
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu

KERNELS = Path(tsm2.__file__).resolve().parent / "kernels"
PREV = {2: 0, 4: 2, 8: 4, 16: 8}  # instantiated size -> the one below it


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, [KERNELS / "tsm2r.cu", KERNELS / "tsm2r_pipelined.cu", KERNELS / "tsm2l.cu"])


def colmajor(rows: int, cols: int, dtype, ld: int | None = None, seed: int = 0):
    """A random-normal column-major rows x cols tensor with leading dimension ld (>= rows)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(cols, ld or rows, device="cuda", dtype=dtype, generator=gen).T[:rows]


def poisoned(rows: int, cols: int, dtype):
    return torch.full((cols, rows), math.nan, device="cuda", dtype=dtype).T


def assert_product(C, A, B):
    """Every element written (no NaN left) and within the tolerance of the fp64 product."""
    ref = torch.mm(A.double(), B.double())
    assert C.shape == ref.shape
    assert torch.isfinite(C).all(), f"{(~torch.isfinite(C)).sum().item()} elements not written"
    scale = max(ref.abs().max().item(), 1e-30)
    err = (C.double() - ref).abs().max().item() / scale
    tol = bench.tolerance(str(A.dtype).removeprefix("torch."), A.shape[1])
    assert err <= tol, f"relative error {err:.3g} > {tol:.3g}"


def _dtype(v: tsm2.Variant):
    return torch.float32 if v.dtype == "f32" else torch.float64


# m not a multiple of anything; (m, ld) with ld > m a multiple of 4 takes the vector path with a
# partial last thread; 4096 is fully aligned. k = 1 and k not a multiple of any tile.
R_SHAPES = [(1037, None, 1), (1037, None, 203), (2561, 2564, 333), (4096, None, 517)]


@pytest.mark.parametrize("name", [v.name for v in tsm2.TSM2R_VARIANTS])
def test_tsm2r_variant_matches_fp64_reference(name, kernels_dir):
    v = tsm2.VARIANTS[name]
    for m, ld, k in R_SHAPES:
        for n in range(PREV[v.n] + 1, v.n + 1):
            A, B = colmajor(m, k, _dtype(v), ld, seed=m + k), colmajor(k, n, _dtype(v), seed=n)
            C = poisoned(m, n, _dtype(v))
            assert tsm2.tsm2r(A, B, out=C, variant=name, kernels_dir=kernels_dir) is C
            torch.cuda.synchronize()
            assert_product(C, A, B)


@pytest.mark.parametrize("name", [v.name for v in tsm2.TSM2L_VARIANTS])
def test_tsm2l_variant_matches_fp64_reference(name, kernels_dir):
    v = tsm2.VARIANTS[name]
    # grid-stride variants: also m past one sweep of the grid (132 SMs x 8 blocks x 256 x 4 rows)
    shapes = ((1001, None), (4099, 4100), (65536, None)) + (((1_200_001, None),) if v.persist else ())
    for m, ld in shapes:
        for k in sorted({PREV[v.k] + 1, v.k}):
            for n in range(PREV[v.n] + 1, v.n + 1):
                A, B = colmajor(m, k, _dtype(v), ld, seed=m + k), colmajor(k, n, _dtype(v), seed=n)
                C = poisoned(m, n, _dtype(v))
                tsm2.tsm2l(A, B, out=C, variant=name, kernels_dir=kernels_dir)
                torch.cuda.synchronize()
                assert_product(C, A, B)


# Split-K regressions seen on an H200: lda = ldc = m a multiple of the vector width and a partial
# last block (m not a multiple of threads * vec); every s2/s4/s8 variant gave relative errors of
# 0.3-0.7 while s1 was right. (m, k, n, dtype, B row-major?)
SPLIT_SHAPES = [(5000, 100, 7, torch.float64, False), (5000, 100, 7, torch.float64, True),
                (20000, 300, 8, torch.float32, False), (1000, 370, 3, torch.float32, False)]


@pytest.mark.parametrize("m,k,n,dtype,b_row_major", SPLIT_SHAPES)
def test_tsm2r_split_variants_on_aligned_partial_blocks(m, k, n, dtype, b_row_major, kernels_dir):
    A = colmajor(m, k, dtype, seed=m + k)
    B = torch.randn(k, n, device="cuda", dtype=dtype) if b_row_major else colmajor(k, n, dtype, seed=n)
    dt = "f32" if dtype == torch.float32 else "f64"
    names = [v.name for v in tsm2.candidates("r", dt, k, n)]
    assert len(names) == (36 if dt == "f32" else 12)  # fp32: the pipelined variants too
    for name in names:
        C = tsm2.tsm2r(A, B, variant=name, kernels_dir=kernels_dir)  # out=None
        torch.cuda.synchronize()
        assert C.stride() == (1, m)
        assert_product(C, A, B)
        out = poisoned(m, n, dtype)
        assert tsm2.tsm2r(A, B, out=out, variant=name, kernels_dir=kernels_dir) is out
        torch.cuda.synchronize()
        assert_product(out, A, B)


# ---- the pipelined TSM2R kernel (tsm2r_pipelined.cu) -----------------------------------------------

PIPELINED = [v.name for v in tsm2.TSM2R_VARIANTS if v.stages]
MAIN = ["tsm2r_f32_n16_t128_v4_s8_w4_p8x3", "tsm2r_f32_n16_t128_v4_s4_w2_p8x3", "tsm2r_f32_n16_t128_v4_s1_w1_p8x3"]


@pytest.mark.parametrize("name", MAIN)
@pytest.mark.parametrize("m,k,n,lda,b_row_major", [
    (1037, 2049, 16, 1040, False),   # partial last block, padded lda (vector copies, last lane 1 row)
    (3001, 333, 13, None, True),     # m % 4 != 0 with lda = m: scalar copies; row-major B; n < N
    (10240, 1280, 16, None, False),  # a paper-grid shape: every block full
    (777, 5, 16, None, False),       # k far below S x KW x 8: most warps' parts are empty
])
def test_pipelined_variant_on_odd_shapes(name, m, k, n, lda, b_row_major, kernels_dir):
    A = colmajor(m, k, torch.float32, lda, seed=m + k)
    B = torch.randn(k, n, device="cuda") if b_row_major else colmajor(k, n, torch.float32, seed=n)
    C = poisoned(m, n, torch.float32)
    tsm2.tsm2r(A, B, out=C, variant=name, kernels_dir=kernels_dir)
    torch.cuda.synchronize()
    assert_product(C, A, B)


@pytest.mark.parametrize("name", MAIN)
def test_pipelined_variant_with_unaligned_a_and_padded_c(name, kernels_dir):
    big = colmajor(4097, 700, torch.float32, 4100)
    A = big[1:]  # the pointer is 4 bytes past a 16-byte boundary: no vector copies
    B = colmajor(700, 16, torch.float32, seed=3)
    base = torch.full((16, 4104), math.nan, device="cuda")
    C = base.T[:4096]  # ldc 4104 > m
    tsm2.tsm2r(A, B, out=C, variant=name, kernels_dir=kernels_dir)
    torch.cuda.synchronize()
    assert_product(C, A, B)
    assert torch.isnan(base[:, 4096:]).all()  # nothing written between the columns


def test_pipelined_reduction_is_deterministic(kernels_dir):
    A, B = colmajor(3001, 4097, torch.float32), colmajor(4097, 16, torch.float32)
    for name in ("tsm2r_f32_n16_t128_v4_s8_w4_p8x3", "tsm2r_f32_n16_t128_v4_s1_w4_p8x3"):
        first = tsm2.tsm2r(A, B, variant=name, kernels_dir=kernels_dir)
        for _ in range(3):
            assert torch.equal(first, tsm2.tsm2r(A, B, variant=name, kernels_dir=kernels_dir)), name


def test_pipelined_kernel_matches_its_numpy_twin(kernels_dir):
    """The GPU result against the twin's float64 walk of the same indexing, on the same float32 inputs."""
    import numpy as np

    from repro.papers.tsm2x.pipelined_twin import run

    name, m, k, n, lda = "tsm2r_f32_n8_t128_v4_s2_w2_p8x3", 1037, 203, 7, 1040
    A, B = colmajor(m, k, torch.float32, lda, seed=5), colmajor(k, n, torch.float32, seed=6)
    C = poisoned(m, n, torch.float32)
    tsm2.tsm2r(A, B, out=C, variant=name, kernels_dir=kernels_dir)
    a = np.full((k, lda), np.nan)
    a[:, :m] = A.T.double().cpu().numpy()
    twin = run(tsm2.VARIANTS[name], m, n, k, a.ravel(), lda, B.T.double().cpu().numpy().ravel(), 1, k,
               np.full(m * n, np.nan), m)
    ref = torch.from_numpy(twin.c.reshape(n, m).T).cuda()
    scale = ref.abs().max().item()
    assert (C.double() - ref).abs().max().item() / scale <= bench.tolerance("float32", k)


def test_tuner_output_checker_agrees_with_cublas(kernels_dir):
    from repro.papers.tsm2x.tuner import check_tolerance, output_checker

    A, B = colmajor(1000, 370, torch.float32), colmajor(370, 3, torch.float32)
    check = output_checker("r", A, B, poisoned(1000, 3, torch.float32), kernels_dir)
    for v in tsm2.candidates("r", "f32", 370, 3):
        assert check(v.name) <= check_tolerance("f32", 370), v.name


def test_split_k_is_deterministic(kernels_dir):
    A, B = colmajor(3001, 4097, torch.float32), colmajor(4097, 16, torch.float32)
    first = tsm2.tsm2r(A, B, variant="tsm2r_f32_n16_t128_v4_s8", kernels_dir=kernels_dir)
    for _ in range(3):
        again = tsm2.tsm2r(A, B, variant="tsm2r_f32_n16_t128_v4_s8", kernels_dir=kernels_dir)
        assert torch.equal(first, again)


def test_default_variant_allocation_and_layout(kernels_dir):
    A, B = colmajor(5000, 100, torch.float64), torch.randn(100, 7, device="cuda", dtype=torch.float64)  # row-major B
    C = tsm2.tsm2r(A, B, kernels_dir=kernels_dir)
    assert isinstance(C, torch.Tensor) and C.stride() == (1, 5000)
    assert_product(C, A, B)
    L = tsm2.tsm2l(colmajor(70000, 3, torch.float32), colmajor(3, 11, torch.float32), kernels_dir=kernels_dir)
    assert L.shape == (70000, 11) and L.stride() == (1, 70000)


def test_k_zero_gives_zeros_and_empty_shapes_are_fine(kernels_dir):
    A = torch.empty(0, 300, device="cuda").T  # 300 x 0
    C = tsm2.tsm2r(A, torch.empty(0, 4, device="cuda"), out=poisoned(300, 4, torch.float32), kernels_dir=kernels_dir)
    torch.cuda.synchronize()
    assert (C == 0).all()
    E = tsm2.tsm2l(colmajor(0, 3, torch.float32), colmajor(3, 2, torch.float32), kernels_dir=kernels_dir)
    assert E.shape == (0, 2)


def test_wrong_variant_and_host_memory_are_refused(kernels_dir):
    A, B = colmajor(100, 10, torch.float32), colmajor(10, 3, torch.float32)
    with pytest.raises(ValueError, match="cannot run"):
        tsm2.tsm2r(A, B, variant="tsm2r_f32_n16_t128_v4_s1", kernels_dir=kernels_dir)
    with pytest.raises(ValueError, match="cannot run"):
        tsm2.tsm2r(A, B, variant="tsm2r_f64_n4_t128_v2_s1", kernels_dir=kernels_dir)
    with pytest.raises(ValueError, match="column-major"):
        tsm2.tsm2r(A.contiguous(), B, kernels_dir=kernels_dir)
    with pytest.raises(ValueError, match="CUDA memory"):
        tsm2.tsm2r(A, B.cpu(), kernels_dir=kernels_dir)


def test_cupy_operands(kernels_dir):
    rng = cupy.random.default_rng(1)
    A = cupy.asfortranarray(rng.standard_normal((999, 77), dtype=cupy.float32))
    B = rng.standard_normal((77, 6), dtype=cupy.float32)  # C-ordered B
    C = tsm2.tsm2r(A, B, kernels_dir=kernels_dir)
    assert isinstance(C, cupy.ndarray) and C.flags.f_contiguous
    assert_product(torch.from_dlpack(C), torch.from_dlpack(A), torch.from_dlpack(B))
    A2 = cupy.asfortranarray(rng.standard_normal((12345, 5)))
    B2 = cupy.asfortranarray(rng.standard_normal((5, 9)))
    out = cupy.full((12345, 9), cupy.nan, order="F")
    assert tsm2.tsm2l(A2, B2, out=out, kernels_dir=kernels_dir) is out
    assert_product(torch.from_dlpack(out), torch.from_dlpack(A2), torch.from_dlpack(B2))


def test_kernels_run_on_torchs_current_stream(kernels_dir):
    A_src, B = colmajor(20000, 300, torch.float32), colmajor(300, 8, torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        A = torch.zeros_like(A_src)
        torch.cuda._sleep(50_000_000)  # ~25 ms: a kernel on another stream would read zeros
        A.copy_(A_src)
        C = tsm2.tsm2r(A, B, kernels_dir=kernels_dir)
        L = tsm2.tsm2l(A[:, :5], B[:5], kernels_dir=kernels_dir)
    side.synchronize()
    assert_product(C, A_src, B)
    assert_product(L, A_src[:, :5], B[:5])


@pytest.mark.parametrize("lib", ["torch", "cupy"])
@pytest.mark.parametrize("route", CUBLAS)
def test_cublas_routes_write_column_major_out(route, lib):
    A, B = colmajor(3000, 40, torch.float64), colmajor(40, 5, torch.float64)
    C = poisoned(3000, 5, torch.float64)
    ops = (A, B, C) if lib == "torch" else tuple(cupy.from_dlpack(x) for x in (A, B, C))
    cublas_call(route, *ops)()
    torch.cuda.synchronize()
    assert_product(C, A, B)


def test_dispatch_tunes_caches_and_falls_back(tmp_path, kernels_dir):
    A, B = colmajor(10240, 1280, torch.float32), colmajor(1280, 4, torch.float32)
    tuner = Tuner(tmp_path / "tuning.json", gpu_name())
    C, choice = dispatch("r", A, B, tuner=tuner, kernels_dir=kernels_dir, batches=2, target_s=1e-3)
    assert_product(C, A, B)
    assert choice.best_variant and set(choice.times_us) == set(REGIMES)
    # every variant, the bound cuBLAS call and the caller's own cuBLAS call (torch.mm), on the caller's call path
    from repro.papers.tsm2x import blas

    assert all(set(t) == {v.name for v in tsm2.candidates("r", "f32", 1280, 4)} | {"cublas_torch", blas.BOUND}
               for t in choice.times_us.values())
    assert not choice.errors, choice.errors  # every variant launches (cluster variants included)
    assert set(choice.confirmed) == set(REGIMES) and "cublas_torch" in choice.confirmed["warm"]
    if not choice.fallback:  # never slower than the fallback under the tuner's own (re-timed) measurement
        assert all(choice.times_us[r][choice.choice] < (1 - DISPATCH_MARGIN) * choice.times_us[r]["cublas_torch"]
                   for r in choice.regimes)
        assert all(choice.times_us[r][choice.choice] <= choice.times_us[r]["cublas_torch"] for r in REGIMES)
    assert Tuner(tmp_path / "tuning.json", gpu_name()).lookup(
        "r", "f32", 10240, 1280, 4, choice.regimes, "torch/bcol/new", DISPATCH_MARGIN, guard=True) == choice
    again, same = dispatch("r", A, B, tuner=tuner, kernels_dir=kernels_dir)  # the cached route
    assert same is choice
    assert_product(again, A, B)
    # a cached cuBLAS verdict is honoured: the operands' own library computes the product into out
    forced = Tuner(None, gpu_name())
    fake = {r: (lambda name: 1e-6 if name == "cublas_torch" else 1e-3) for r in REGIMES}
    forced.choose("l", "f64", 3333, 3, 3, fake, regimes=REGIMES, routes=("cublas_torch",), path="torch/bcol/out")
    A2, B2 = colmajor(3333, 3, torch.float64), colmajor(3, 3, torch.float64)
    out = poisoned(3333, 3, torch.float64)
    C2, choice2 = dispatch("l", A2, B2, out, tuner=forced, kernels_dir=kernels_dir)
    torch.cuda.synchronize()
    assert C2 is out and choice2.fallback and choice2.choice == "cublas_torch"
    assert_product(out, A2, B2)


@pytest.mark.parametrize("order", ["F", "C"])
def test_cupy_native_route_with_and_without_out(order):
    """A CuPy caller's fallback (the @ routine, out through cupy._core.matmul) computes the product."""
    A, B = colmajor(4001, 37, torch.float32), colmajor(37, 5, torch.float32)
    cA, cB = cupy.from_dlpack(A), cupy.from_dlpack(B)
    route = native_route(cA)
    C = route(cA, cB, None)
    assert isinstance(C, cupy.ndarray)
    out = cupy.full((4001, 5), cupy.nan, dtype=cupy.float32, order=order)
    assert route(cA, cB, out) is out
    torch.cuda.synchronize()
    assert_product(torch.from_dlpack(C), A, B)
    assert_product(torch.from_dlpack(out), A, B)


def test_matmul_is_right_for_any_operands(tmp_path, kernels_dir):
    """TSM2R and TSM2L shapes, a non-contiguous B, the cached route, CuPy operands, and operands our
    kernels refuse (row-major A, n > 16), which go to the library's own matmul."""
    tuner = Tuner(tmp_path / "tuning.json", gpu_name())
    A = colmajor(5001, 333, torch.float32)
    B = torch.randn(333, 12, device="cuda")[:, ::2]  # neither row- nor column-major
    wide = torch.randn(333, 20, device="cuda")
    for a, b in ((A, B), (A, B), (A.contiguous(), B), (A, wide)):
        assert_product(matmul(a, b, tuner=tuner, kernels_dir=kernels_dir), a, b)
    cA, cB = cupy.from_dlpack(A), cupy.from_dlpack(B)
    cC = matmul(cA, cB, tuner=tuner, kernels_dir=kernels_dir)
    assert isinstance(cC, cupy.ndarray)
    assert_product(torch.from_dlpack(cC), A, B)
    A2, B2 = colmajor(70001, 5, torch.float64), colmajor(5, 3, torch.float64)
    out = poisoned(70001, 3, torch.float64)
    assert matmul(A2, B2, out, tuner=tuner, kernels_dir=kernels_dir) is out
    assert_product(out, A2, B2)
    with pytest.raises(ValueError, match="expect must be one of"):
        matmul(A, B, tuner=tuner, kernels_dir=kernels_dir, expect="hot")


def test_bound_launch_follows_each_calls_pointers(kernels_dir):
    """tsm2.bind: one check, then calls on other operands of the same signature, aligned or not."""
    name = "tsm2r_f32_n8_t128_v4_s2"
    big = colmajor(4097, 300, torch.float32, 4100)
    A, A_unaligned = big[:4096], big[1:]
    B = colmajor(300, 7, torch.float32, seed=2)
    run = tsm2.bind("r", A, B, None, name, kernels_dir)
    for a in (A, A_unaligned, colmajor(4096, 300, torch.float32, 4100, seed=9)):
        assert_product(run(a, B), a, B)
        out = poisoned(4096, 7, torch.float32)
        assert run(a, B, out) is out
        assert_product(out, a, B)


def _ctx(tmp_path: Path, kernels_dir: Path) -> Context:
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps({"metrics": {"d2d_copy_GBps": 4180.0, "launch_us": 5.0}}))
    return Context(out_dir=tmp_path, scale="smoke", device="cuda",
                   inputs={"kernels": kernels_dir, "ceilings": ceilings})


TINY = dict(dtypes=["float32", "float64"], warmup=1, min_repeats=2, max_repeats=4, target_ms=0.5,
            tune_min_repeats=1, tune_max_repeats=2, tune_target_ms=0.2, rotate_bytes=1 << 22)


def test_bench_tsm2_r_end_to_end(tmp_path, kernels_dir):
    res = bench.tsm2_r(bench.TSM2RParams(m=[1000], k_over_m=[0.37], n=[3], **TINY), _ctx(tmp_path, kernels_dir))
    df = res.tables["points"]
    assert len(df) == 2 and df["ok"].all(), df[["dtype", "err_ours", "err_torch", "err_cupy", "tol"]]
    assert (df[["t_ours_us", "t_torch_us", "t_cupy_us"]] > 0).all().all()
    assert {"geomean_speedup_fp32", "geomean_speedup_fp64", "min_speedup_fp32", "min_speedup_fp64",
            "mean_bw_gain_vs_cublas", "n_points", "n_fallback"} <= set(res.metrics)
    assert 1000 < res.metrics["read_gbps"] < 10_000 and 1000 < res.metrics["write_gbps"] < 10_000
    assert (df["mix_frac_ours"] > 0).all()
    assert res.artifacts["tuning"].exists()
    df.to_csv(tmp_path / "points.csv", index=False)
    assert len(figures.tsm2_r(tmp_path).axes) == 4


def test_bench_tsm2_l_end_to_end(tmp_path, kernels_dir):
    res = bench.tsm2_l(bench.TSM2LParams(m=[50001], k=[5], n=[2], **TINY), _ctx(tmp_path, kernels_dir))
    df = res.tables["points"]
    assert len(df) == 2 and df["ok"].all(), df[["dtype", "err_ours", "err_torch", "err_cupy", "tol"]]
    assert {"geomean_speedup", "geomean_speedup_fp32", "geomean_speedup_fp64", "min_speedup",
            "n_points", "n_fallback"} <= set(res.metrics)
    df.to_csv(tmp_path / "points.csv", index=False)
    assert len(figures.tsm2_l(tmp_path).axes) == 4


def test_bench_dispatch_end_to_end(tmp_path, kernels_dir):
    p = bench.DispatchParams(m=[1001], k=[37], n=[3], b_layouts=["colmajor", "strided"], dtypes=["float32", "float64"],
                             warmup=1, call_batches=2, call_target_ms=0.5, rotate_bytes=1 << 22)
    res = bench.tsm2_dispatch(p, _ctx(tmp_path, kernels_dir))
    df = res.tables["points"]
    assert len(df) == 4 and df["ok"].all(), df[["dtype", "b_layout", "err_torch", "err_cupy", "tol"]]
    times = [c for c in df.columns if c.startswith("t_") and c.endswith("_us")]
    assert len(times) == 10 and (df[times] > 0).all().all()
    assert {"dispatch_min_vs_cublas_warm", "dispatch_min_vs_cublas_cold", "dispatch_geomean_vs_cublas_warm",
            "n_points", "n_fallback"} <= set(res.metrics)
    assert res.artifacts["tuning"].exists()


def test_cold_copies_keep_the_callers_strides():
    """The cold timing rotates over copies laid out as the caller's operands: a CuPy B[:, ::2] stays strided."""
    from repro.papers.tsm2x.tuner import copy_like

    B = torch.randn(333, 12, device="cuda")[:, ::2]
    for x in (B, cupy.from_dlpack(B), cupy.from_dlpack(colmajor(500, 7, torch.float64, ld=512))):
        y = copy_like(x)
        assert type(y) is type(x) and y.shape == x.shape
        assert (y.stride() if isinstance(y, torch.Tensor) else y.strides) == \
            (x.stride() if isinstance(x, torch.Tensor) else x.strides)
        assert torch.equal(torch.from_dlpack(y), torch.from_dlpack(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m, k, n, b_row_major", [(10_000, 333, 1, False), (10_001, 333, 3, True),
                                                  (4097, 1037, 16, True), (513, 7, 2, False), (100, 0, 4, False)])
def test_bound_cublas_call_matches_the_reference(m, k, n, b_row_major, dtype):
    from repro.papers.tsm2x import blas

    A = colmajor(m, k, dtype, ld=m + 3)
    B = (torch.randn(k, n, device="cuda", dtype=dtype) if b_row_major else colmajor(k, n, dtype, seed=1))
    run = blas.bind("l" if k <= tsm2.MAX_K_L else "r", A, B)
    C = run(A, B)
    assert C.stride() == (1, m)  # column-major, as our kernels' C
    assert_product(C, A, B)
    out = poisoned(m, n, dtype)
    assert blas.bind("l" if k <= tsm2.MAX_K_L else "r", A, B, out)(A, B, out) is out
    assert_product(out, A, B)
    cA, cB = cupy.from_dlpack(A), cupy.from_dlpack(B)  # CuPy operands: CuPy's stream
    assert_product(torch.from_dlpack(blas.bind("r" if k > tsm2.MAX_K_L else "l", cA, cB)(cA, cB)), A, B)


def test_bound_cublas_call_runs_on_torchs_current_stream():
    from repro.papers.tsm2x import blas

    A, B = colmajor(20_000, 1037, torch.float32), colmajor(1037, 8, torch.float32, seed=1)
    run = blas.bind("r", A, B)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # not CuPy's current stream: the bound call must follow torch's
        A2 = torch.zeros_like(A)  # A's strides
        torch.cuda._sleep(50_000_000)  # ~25 ms: a call on another stream would read zeros
        A2.copy_(A)
        C = run(A2, B)
    side.synchronize()
    assert_product(C, A, B)
