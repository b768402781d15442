"""The b1 MMA kernel (kernels/qgtc_bmma.cu) against its NumPy twin and integer matmul on a GPU: every
(NT, KS) variant, bit widths 1..8, odd sizes, zero-tile jumping (its counters against the twin's), and
the issue-rate microbenchmark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

from repro.papers.qgtc import bitplanes, bmma  # noqa: E402
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu

KERNELS = Path(bmma.__file__).resolve().parent / "kernels"


@pytest.fixture(scope="module")
def kdir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, [KERNELS / "qgtc_bmma.cu"])


def rand(rows, cols, bits, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, 1 << bits, (rows, cols), device="cuda", generator=gen, dtype=torch.int32)


@pytest.mark.parametrize("variant", bmma.VARIANTS)
def test_every_variant_matches_integer_matmul(kdir, variant):
    m, k, n = 83, 1100, 45
    qa, qb = rand(m, k, 2, 1), rand(k, n, 3, 2)
    c = bmma.run(bmma.pack(qa, 2), bmma.pack(qb.T, 3, 8), variant=variant, kernels_dir=kdir)
    torch.cuda.synchronize()
    ref = (qa.double() @ qb.double()).to(torch.int64)
    assert torch.equal(c.to(torch.int64), ref)


@pytest.mark.parametrize("a_bits,b_bits", [(1, 1), (1, 8), (4, 4), (8, 8), (3, 6)])
@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 256, 8), (129, 513, 70)])
def test_bit_widths_and_odd_sizes_match_the_twin(kdir, a_bits, b_bits, shape):
    m, k, n = shape
    qa, qb = rand(m, k, a_bits, m), rand(k, n, b_bits, n)
    c = bmma.int_matmul(qa, a_bits, qb, b_bits, kernels_dir=kdir).cpu().numpy()
    twin, _ = bitplanes.int_matmul(qa.cpu().numpy(), a_bits, qb.cpu().numpy(), b_bits)
    np.testing.assert_array_equal(c, twin)


def test_packing_matches_the_twins(kdir):
    q = rand(37, 300, 5, 7)
    dev = bmma.pack(q, 5).words.cpu().numpy().view(np.uint32)
    np.testing.assert_array_equal(dev, bitplanes.pack(q.cpu().numpy(), 5).words)


def test_zero_tile_counters_match_the_twin(kdir):
    adj = torch.zeros((96, 768), dtype=torch.int32, device="cuda")
    for blk in range(3):
        adj[32 * blk:32 * (blk + 1), 256 * blk:256 * (blk + 1)] = rand(32, 256, 1, blk)
    x = rand(768, 16, 2, 9)
    counters = torch.zeros(2, dtype=torch.int64, device="cuda")
    c = bmma.run(bmma.pack(adj, 1), bmma.pack(x.T, 2, 8), counters=counters, variant=(2, 1), kernels_dir=kdir)
    torch.cuda.synchronize()
    _, stats = bitplanes.int_matmul(adj.cpu().numpy(), 1, x.cpu().numpy(), 2)
    assert torch.equal(c.to(torch.int64), (adj.double() @ x.double()).to(torch.int64))
    assert counters.tolist() == [stats.tiles, stats.skipped]


def test_peak_issue_rate_is_measured(kdir):
    peak = bmma.peak_tops(iters=256, repeats=3, kernels_dir=kdir)
    assert peak["peak_b1_tops"] > 100  # far above any CUDA-core rate; H100: thousands


@pytest.mark.parametrize("dims", [(20, 16), (16, 5)])
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_the_layer_products_on_the_kernel_are_exact(kdir, monkeypatch, bits, dims):
    """The QGCN layer's two products one by one at its shapes, so that a layer that differs from its twin
    while the kernel tests pass shows which product: X W through int_matmul and (A + I) H through the
    packed adjacency, against float64 products of the same codes."""
    from repro.papers.qgtc import layers

    monkeypatch.setenv("REPRO_KERNELS_DIR", str(kdir))
    gen = torch.Generator().manual_seed(0)
    a = (torch.rand(90, 90, generator=gen) < 0.1).float()
    adj, _ = layers.with_self_loops(torch.triu(a, 1) + torch.triu(a, 1).T)
    qx, _, _ = layers.quantize(torch.randn(90, dims[0], generator=gen).cuda(), bits)
    qw, _, _ = layers.quantize(torch.randn(*dims, generator=gen).cuda(), bits)
    xw = layers.int_matmul(qx, bits, qw, bits, "gpu")
    torch.cuda.synchronize()
    assert torch.equal(xw, qx.double() @ qw.double())
    qh, _, _ = layers.quantize(torch.randn(90, dims[1], generator=gen).cuda(), bits)
    ah = layers.Binary(adj.cuda(), "gpu").times(qh, bits)
    torch.cuda.synchronize()
    assert torch.equal(ah, adj.cuda().double() @ qh.double())


def _small_graph():
    """A 90-node graph with self loops (dense 0/1), 1 / its degrees, and 20 features a node."""
    from repro.papers.qgtc import layers

    gen = torch.Generator().manual_seed(0)
    a = (torch.rand(90, 90, generator=gen) < 0.1).float()
    adj, deg_inv = layers.with_self_loops(torch.triu(a, 1) + torch.triu(a, 1).T)
    return adj, deg_inv, torch.randn(90, 20, generator=gen)


def _qgcn_on_both(cpu_backend: str, gpu_backend: str):
    """(GPU output brought back, CPU output) of the same two-layer 2-bit QGCN on _small_graph."""
    from repro.papers.qgtc import layers

    adj, deg_inv, x = _small_graph()
    cpu = layers.QGCN([20, 16, 5], 2, cpu_backend, seed=1)(adj, deg_inv, x)
    gpu = layers.QGCN([20, 16, 5], 2, gpu_backend, seed=1).cuda()(adj.cuda(), deg_inv.cuda(), x.cuda())
    return gpu.cpu(), cpu


def _recovered(prod, recover, k: int):
    """What bmma's float epilogue must write for the integer product `prod` (float64): layers' torch
    recovery of the same terms (a missing lo 0, scale 1, sum 0), cast to float32; prod itself where
    recover is None."""
    from repro.papers.qgtc import layers

    if recover is None:
        return prod
    one, zero = torch.ones((), device="cuda"), torch.zeros((), device="cuda")
    r = recover
    sums = [s if s is not None else torch.zeros(n, dtype=torch.int32, device="cuda")
            for s, n in ((r.rowsum_a, prod.shape[0]), (r.colsum_b, prod.shape[1]))]
    return layers._recover(prod, r.lo_a if r.lo_a is not None else zero, r.s_a if r.s_a is not None else one,
                           sums[0][:, None], r.lo_b if r.lo_b is not None else zero,
                           r.s_b if r.s_b is not None else one, sums[1][None, :], k).float()


@pytest.mark.parametrize("binary_a", [False, True])
def test_the_float_epilogue_is_the_torch_recovery(kdir, monkeypatch, binary_a):
    """bmma.Recover's epilogue against layers._recover on the same integer product, bit for bit (float64
    operations in the same order, no FMA contraction): the quantized product's terms, and the
    aggregation's (A binary: lo_a and s_a absent, no column sums)."""
    from repro.papers.qgtc import layers

    monkeypatch.setenv("REPRO_KERNELS_DIR", str(kdir))
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, w = torch.randn(90, 37, device="cuda", generator=gen), torch.randn(37, 12, device="cuda", generator=gen)
    if binary_a:
        pa, _, _, rowsum_a = bmma.quantize_pack((x > 0.5).float(), 1, codes=True, kernels_dir=kdir)
        lo_a = s_a = None
    else:
        pa, lo_a, s_a, rowsum_a = bmma.quantize_pack(x, 2, kernels_dir=kdir)
    pb, lo_b, s_b, colsum_b = bmma.quantize_pack(w.T, 3, bitplanes.TILE_N, kernels_dir=kdir)
    recover = bmma.Recover(lo_a, s_a, lo_b, s_b, rowsum_a, None if binary_a else colsum_b)
    got = bmma.run(pa, pb, kernels_dir=kdir, recover=recover)
    prod = bmma.run(pa, pb, kernels_dir=kdir).double()
    assert got.dtype == torch.float32 and torch.equal(got, _recovered(prod, recover, pa.k))
    if not binary_a:  # and the fused product equals the unfused one (quantize, int_matmul, recovery)
        assert torch.equal(layers._product_fused(x, w, 2, 3), layers._product(x, w, 2, 3, "gpu")[0])


def _codes(planes: "bmma.DevicePlanes") -> np.ndarray:
    """The integer matrix (rows x k) a DevicePlanes holds, through the twin's unpack."""
    words = planes.words.cpu().numpy().view(np.uint32)
    return bitplanes.unpack(bitplanes.Planes(words, planes.rows, planes.k)).astype(np.int64)


@pytest.mark.parametrize("grad", [False, True])
def test_every_product_inside_the_qgcn_forward_is_exact(kdir, monkeypatch, grad):
    """Each integer product the two-layer QGCN's forward pass makes on the GPU (every one goes through
    bmma.run: X W, quantized and packed by quantize_pack without autograd and by quantize + pack with
    it, and (A + I) H), checked where it is made against the product of the codes its planes hold:
    names the first product, and its shapes, that goes wrong inside the model."""
    from repro.papers.qgtc import layers

    monkeypatch.setenv("REPRO_KERNELS_DIR", str(kdir))
    seen = []
    run = bmma.run

    def checked_run(a, b, *args, recover=None, **kw):
        c = run(a, b, *args, recover=recover, **kw)
        want = _recovered(torch.from_numpy(_codes(a) @ _codes(b).T).cuda().double(), recover, a.k)
        seen.append(((a.rows, a.k), (b.rows, b.k), a.bits, b.bits, torch.equal(c.to(want.dtype), want)))
        return c

    monkeypatch.setattr(bmma, "run", checked_run)
    adj, deg_inv, x = _small_graph()
    with torch.set_grad_enabled(grad):
        layers.QGCN([20, 16, 5], 2, "gpu", seed=1).cuda()(adj.cuda(), deg_inv.cuda(), x.cuda())
    assert len(seen) == 4
    assert all(ok for *_, ok in seen), seen


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("shape,transposed", [((90, 20), False), ((16, 90), True), ((300, 513), False)])
def test_quantize_pack_is_quantize_then_pack(kdir, bits, shape, transposed):
    """The fused kernel against layers.quantize followed by bmma.pack on the same matrix (x.T read in
    place where transposed): the same planes, row sums of the codes, lo and scale, bit for bit."""
    from repro.papers.qgtc import layers

    gen = torch.Generator(device="cuda").manual_seed(bits)
    base = torch.randn(*(shape[::-1] if transposed else shape), device="cuda", generator=gen) * 3 + 1
    x = base.T if transposed else base
    planes, lo, scale, rowsum = bmma.quantize_pack(x, bits, kernels_dir=kdir)
    q, lo_ref, scale_ref = layers.quantize(x, bits)
    assert torch.equal(planes.words, bmma.pack(q, bits).words)
    assert torch.equal(rowsum, q.sum(1, dtype=torch.int32)) and torch.equal(lo, lo_ref) and torch.equal(scale, scale_ref)


def test_quantize_pack_packs_codes_as_they_are(kdir):
    """codes=True (Binary's adjacency): a 0/1 matrix packed unchanged at 1 bit, its row degrees summed."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    adj = (torch.rand(300, 300, device="cuda", generator=gen) < 0.05).float()
    planes, lo, scale, rowsum = bmma.quantize_pack(adj, 1, codes=True, kernels_dir=kdir)
    assert lo is None and scale is None
    assert torch.equal(planes.words, bmma.pack(adj.to(torch.int32), 1).words)
    assert torch.equal(rowsum, adj.sum(1).to(torch.int32))


def test_the_qgcn_without_the_kernel_agrees_across_devices():
    """The same QGCN with the float64 "exact" product on the GPU and on the CPU: what the model does
    around its products (quantisation, recovery, scaling) is device-independent, so a mismatch of the
    kernel path against the twin that this test does not share lies in the kernel path."""
    torch.testing.assert_close(*_qgcn_on_both("exact", "exact"), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("grad", [False, True])
def test_quantized_gcn_on_the_kernel_matches_the_twin(kdir, monkeypatch, grad):
    """With and without autograd: without, X W runs on the fused quantize_pack."""
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(kdir))
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(*_qgcn_on_both("twin", "gpu"), rtol=1e-3, atol=1e-3)


def test_the_kernel_runs_on_torchs_current_stream(kdir):
    """bmma launches on the stream torch's next op runs on (the default one and a side stream), so that
    an op after it reads its output without a synchronisation."""
    from repro import kernels

    dev = torch.cuda.current_device()
    assert kernels.launch_stream(True, dev).ptr == torch.cuda.current_stream().cuda_stream
    assert kernels.stream_handle(True, dev) == torch.cuda.current_stream().cuda_stream  # kernels.Launch's
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert kernels.launch_stream(True, dev).ptr == side.cuda_stream
        assert kernels.stream_handle(True, dev) == side.cuda_stream


@pytest.mark.parametrize("on_side_stream", [False, True])
def test_products_order_with_torch_work_queued_around_them(kdir, on_side_stream):
    """A busy queue before the product (a large matmul) and a torch op reading its output right after,
    with no synchronisation between: a kernel on any other stream than torch's reads operands not yet
    packed or is read before it has written."""
    stream = torch.cuda.Stream() if on_side_stream else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        qa, qb = rand(90, 20, 2, 3), rand(20, 16, 2, 4)
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(4):
            big = big @ big / 64  # milliseconds of work ahead of the packing and the kernel
        c = bmma.int_matmul(qa, 2, qb, 2, kernels_dir=kdir).to(torch.float64) + big[:90, :16].sum() * 0
    stream.synchronize()
    assert torch.equal(c, qa.double() @ qb.double())


def test_the_epoch_replays_as_one_cuda_graph(kdir, monkeypatch):
    """gnn's graph paths: the QGCN epoch (bmma launched through kernels.Launch on torch's capture
    stream) and the cuSPARSE one are captured, replay to the eager outputs, and are timed."""
    import math

    from repro.data import graphs as graphlib
    from repro.papers.qgtc import gnn

    monkeypatch.setenv("REPRO_KERNELS_DIR", str(kdir))
    p = gnn.GnnParams(graph_scale=0.01, parts=8, clusters_per_batch=2, time_epochs=2)
    g = graphlib.dataset_graph("artist", p.graph_scale, seed=0, gamma=p.gamma, p_in=p.p_in, signal=p.signal)
    rows = {r["path"]: r for r in gnn.epoch_times(g, gnn.make_batches(g, p, "cuda", 0), p, 1.0, 0)}
    for name in gnn.GRAPHED:
        graph = rows[f"{name}_graph"]
        assert math.isfinite(graph["t_ms"]) and graph["note"].startswith("one CUDA graph"), graph
        assert float(graph["note"].rsplit(" ", 1)[1]) <= 1e-4, graph["note"]

