"""The bound cuBLAS call (repro.papers.tsm2x.blas) on the CPU: B's layout as a cuBLAS operation, the
GEMM's arguments and stream through a fake cuBLAS, and dispatch choosing it only where it measured
faster than the caller's own call by the margin."""

from __future__ import annotations

import functools
import sys
from types import SimpleNamespace

import pytest

from repro.papers.tsm2x import blas, tsm2
from repro.papers.tsm2x import tuner as tuner_mod
from repro.papers.tsm2x.tuner import CUBLAS, REGIMES, Tuner

from test_tsm2_cpu import FakeCudaArray, FakeDeviceArray, colmajor, fake_gpu  # noqa: F401 (a fixture)


def matrix(rows, cols, row_stride, col_stride):
    return tsm2.Matrix("cai", 1 << 30, rows, cols, row_stride, col_stride, "f32", 0)


@pytest.mark.parametrize("b, expected", [
    (matrix(333, 4, 1, 333), (blas.OP_N, 333)),     # column-major
    (matrix(333, 4, 1, 340), (blas.OP_N, 340)),     # column-major, padded columns
    (matrix(333, 4, 4, 1), (blas.OP_T, 4)),         # row-major: cuBLAS reads B^T
    (matrix(333, 4, 8, 1), (blas.OP_T, 8)),         # row-major, padded rows (a column slice)
    (matrix(333, 1, 1, 5), (blas.OP_N, 333)),       # one column, contiguous: its column stride is no matter
    (matrix(333, 1, 3, 999), (blas.OP_T, 3)),       # one column, every third element: a 1 x k row of B^T
    (matrix(1, 6, 9, 2), (blas.OP_N, 2)),           # one row, every other element
    (matrix(0, 4, 1, 0), (blas.OP_N, 1)),           # k = 0: nothing read, any ld >= 1
])
def test_b_is_read_in_place_as_a_cublas_operation(b, expected):
    assert blas.b_operation(b) == expected


@pytest.mark.parametrize("b", [matrix(333, 4, 2, 800),   # strided both ways (a [:, ::2] of a row-major B)
                               matrix(333, 4, 1, 300),   # columns overlap
                               matrix(333, 1, 0, 1),     # a broadcast column
                               matrix(1, 6, 1, 0)])      # a broadcast row
def test_a_b_cublas_cannot_read_in_place_is_refused(b):
    with pytest.raises(ValueError, match="cuBLAS cannot read it in place"):
        blas.b_operation(b)


@pytest.fixture
def fake_cublas(monkeypatch):
    """cupy and cupy_backends' cuBLAS replaced: gemm calls and streams recorded, device 0 current
    unless `state.device` says otherwise, CuPy's current stream `state.stream`."""
    state = SimpleNamespace(calls=[], streams=[], device=0, stream=0, contexts=[], created=0)

    def create():
        state.created += 1
        return 4000 + state.created

    def gemm(name):
        return lambda *args: state.calls.append((name, *args))

    class Ctx:
        def __init__(self, *what):
            self.what = what

        def __enter__(self):
            state.contexts.append(self.what)

        def __exit__(self, *exc):
            pass

    cublas = SimpleNamespace(create=create, setStream=lambda h, s: state.streams.append((h, s)),
                             sgemm=gemm("sgemm"), dgemm=gemm("dgemm"))
    runtime = SimpleNamespace(getDevice=lambda: state.device)
    empty = lambda shape, dtype, order: colmajor(*shape, dtype="<f8" if dtype == "float64" else "<f4", ptr=1 << 40)
    cuda = SimpleNamespace(runtime=runtime, Device=lambda d: Ctx("device", d),
                           ExternalStream=lambda s, d: Ctx("stream", s, d),
                           get_current_stream=lambda: SimpleNamespace(ptr=state.stream))
    libs = SimpleNamespace(cublas=cublas)
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda, empty=empty))
    monkeypatch.setitem(sys.modules, "cupy_backends", SimpleNamespace(cuda=SimpleNamespace(libs=libs)))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda", SimpleNamespace(libs=libs))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", libs)
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.cublas", cublas)
    monkeypatch.setattr(blas, "_HANDLES", {})
    monkeypatch.setattr(blas, "_LAST_STREAM", {})
    return state


def test_a_bound_call_passes_the_gemm_its_operands_and_sets_the_stream_once(fake_cublas):
    A = colmajor(10_000, 333, ld=10_004, dtype="<f8", ptr=1 << 30)
    B = FakeDeviceArray((333, 4), None, dtype="<f8", ptr=1 << 34)  # row-major
    run = blas.bind("r", A, B)
    C = run(A, B)
    C2 = run(colmajor(10_000, 333, ld=10_004, dtype="<f8", ptr=1 << 31), B)
    assert tsm2.describe(C, "C") == tsm2.describe(C2, "C")  # column-major 10000 x 4 from cupy.empty
    (name, h, opa, opb, m, n, k, one, pa, lda, pb, ldb, zero, pc, ldc), second = fake_cublas.calls
    assert (name, opa, opb, m, n, k, lda, ldb, ldc) == ("dgemm", blas.OP_N, blas.OP_T, 10_000, 4, 333, 10_004, 4, 10_000)
    assert (pa, pb, pc) == (1 << 30, 1 << 34, 1 << 40) and second[8] == 1 << 31
    assert blas._SCALARS["f64"][0].value == 1.0 and one != zero
    assert fake_cublas.streams == [(h, 0)] and fake_cublas.created == 1  # set once, one handle per device
    fake_cublas.stream = 77  # CuPy's current stream changed: the handle follows it
    run(A, B)
    assert fake_cublas.streams[-1] == (h, 77) and fake_cublas.contexts == [("device", 0)]  # the handle's making only


def test_a_call_from_another_current_device_enters_the_operands_device_and_stream(fake_cublas):
    A, B = colmajor(5000, 20, ptr=1 << 30), colmajor(20, 2, ptr=1 << 34)
    out = colmajor(5000, 2, ptr=1 << 36)
    run = blas.bind("r", A, B, out)
    fake_cublas.device = 1
    assert run(A, B, out) is out
    assert fake_cublas.contexts == [("device", 0), ("device", 0), ("stream", 0, 0)]  # the handle made on 0, then the call
    assert fake_cublas.calls[-1][0] == "sgemm" and fake_cublas.calls[-1][-2:] == (1 << 36, 5000)


def test_a_b_strided_both_ways_is_not_bound(fake_cublas):
    with pytest.raises(ValueError, match="in place"):
        blas.bind("r", colmajor(5000, 20), FakeDeviceArray((20, 2), (2, 100), ptr=1 << 34))


def test_dispatch_runs_the_bound_call_only_where_it_beat_the_callers_call(fake_gpu, monkeypatch):
    bound = []
    monkeypatch.setattr(blas, "bind", lambda kind, A, B, out=None: bound.append(kind) or (
        lambda A2, B2, out2=None: fake_gpu.ran.append(blas.BOUND) or out2))
    A, B = FakeCudaArray((10_000, 333), (1, 10_000)), FakeCudaArray((333, 1), None, ptr=1 << 34)
    C = FakeCudaArray((10_000, 1), (1, 10_000), ptr=1 << 36)
    for name in [v.name for v in tsm2.candidates("r", "f32", 333, 1)]:
        fake_gpu.times[("warm", name)], fake_gpu.times[("cold", name)] = 11e-6, 14e-6
    for route in CUBLAS:
        fake_gpu.times[("warm", route)], fake_gpu.times[("cold", route)] = 9.5e-6, 13e-6
    fake_gpu.times[("warm", blas.BOUND)], fake_gpu.times[("cold", blas.BOUND)] = 6e-6, 12e-6
    _, choice = tuner_mod.dispatch("r", A, B, C, tuner=Tuner(None, "H100"))  # 13 MB: warm decides
    assert choice.choice == blas.BOUND and not choice.fallback and fake_gpu.ran == [blas.BOUND] and bound == ["r"]
    fake_gpu.times[("warm", blas.BOUND)] = 9.2e-6  # 3% faster than the caller's call: inside the margin
    _, choice = tuner_mod.dispatch("r", A, B, C, tuner=Tuner(None, "H100"))
    assert choice.fallback and fake_gpu.ran[-1] == "native"


def test_matmul_without_a_tuner_asks_for_the_default_one_only_to_resolve(monkeypatch):
    import torch

    asked, resolved = [], []
    monkeypatch.setattr(tuner_mod, "_DEFAULT_ROUTES", {})
    monkeypatch.setattr(tuner_mod, "default_tuner", lambda: asked.append(1) or Tuner(None, "cpu"))
    monkeypatch.setattr(tuner_mod, "_resolve", lambda *a: resolved.append(a[0]) or (lambda A, B: A @ B, None))
    A, B = torch.ones(64, 32), torch.ones(32, 4)
    for _ in range(3):
        assert torch.equal(tuner_mod.matmul(A, B), A @ B)
    assert asked == [1] and resolved == ["r"]
    tuner_mod.matmul(A, torch.ones(32, 2))  # another signature: resolved, with the default tuner asked again
    assert len(asked) == 2 and len(tuner_mod._DEFAULT_ROUTES) == 2
