"""The GPU codec and the hooks on a CUDA GPU: streams bit-identical to the NumPy codec on every
property-test input (flat and channels-last kernels, exact-size and arena paths), the bound, bad
input, layouts and alignment, streams, overflow and NaN/Inf in an arena, the memory really freed
(exact) or reserved (arena) in training, a training step captured as a CUDA graph, and the
experiments at smoke size. Codec v4 (kernels/comet_huffman.cu, the ``test_v4_*`` tests at the end):
streams bit-identical to its NumPy twin (with each tensor's own book and with a cached covering
book built from another tensor), the GPU decoder on the twin's streams, GPU round trips within the
bound, NaN/Inf refused, one host sync per tensor with a cached book, the hooks with codec v4.

Kernels come from $REPRO_KERNELS_DIR (a `snakemake build_kernels` output) or are compiled here
with nvcc into a temporary folder.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

from cases import cases  # noqa: E402
from repro.papers.comet import arena, buffers, codec, codec_v4, gpu_codec, gpu_codec_v4  # noqa: E402
from repro.papers.comet.hooks import make_hooks  # noqa: E402
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu

KERNELS = Path(gpu_codec.__file__).resolve().parent / "kernels"
CASES = cases()


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, [KERNELS / "comet_codec.cu", KERNELS / "comet_huffman.cu"])


def assert_same_stream(x: np.ndarray, eb: float, kernels_dir: Path) -> None:
    ref = codec.compress(x, eb)
    got_dev = gpu_codec.compress(torch.from_numpy(x.reshape(-1)).cuda(), eb, kernels_dir)
    got = gpu_codec.to_cpu(got_dev)
    np.testing.assert_array_equal(got.widths, ref.widths)
    np.testing.assert_array_equal(got.anchors, ref.anchors)
    np.testing.assert_array_equal(got.payload, ref.payload)
    assert got_dev.nbytes == ref.nbytes + 8 * buffers.ntiles(ref.widths.size)  # + the tile starts it holds
    assert torch.equal(got_dev.tile_starts, gpu_codec.tile_starts(got_dev.widths))
    y = gpu_codec.decompress(got_dev, kernels_dir=kernels_dir).cpu().numpy()
    np.testing.assert_array_equal(y, codec.decompress(ref))  # bit-identical values
    assert np.abs(x.reshape(-1).astype(np.float64) - y).max(initial=0) <= np.float32(eb)
    # the GPU decoder also reads the CPU stream
    back = codec.Compressed(ref.n, ref.eb, torch.from_numpy(ref.widths).cuda(), torch.from_numpy(ref.anchors).cuda(),
                            torch.from_numpy(ref.payload.view(np.int32)).cuda())
    np.testing.assert_array_equal(gpu_codec.decompress(back, kernels_dir=kernels_dir).cpu().numpy(), y)


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_gpu_stream_equals_cpu_stream(name, x, ebs, kernels_dir):
    for eb in ebs + [0.0]:
        assert_same_stream(x, eb, kernels_dir)


@pytest.mark.parametrize("n", [1, 3, 4, 127, 128, 1023, 1024, 1025, 4097, 3 * 2**20 + 5])
def test_sizes(n, kernels_dir):
    rng = np.random.default_rng(n)
    x = np.maximum(rng.standard_normal(n), 0).astype(np.float32)
    assert_same_stream(x, 0.02, kernels_dir)


def test_empty_and_non_finite(kernels_dir):
    c = gpu_codec.compress(torch.zeros(0, device="cuda"), 0.1, kernels_dir)
    assert c.n == 0 and gpu_codec.decompress(c, kernels_dir=kernels_dir).numel() == 0
    for bad in (float("nan"), float("inf")):
        x = torch.ones(5000, device="cuda")
        x[4321] = bad
        with pytest.raises(ValueError, match="non-finite values: 1 NaN/Inf"):
            gpu_codec.compress(x, 0.1, kernels_dir)
    with pytest.raises(ValueError, match="error bound eb"):
        gpu_codec.compress(torch.ones(10, device="cuda"), -1.0, kernels_dir)
    with pytest.raises(ValueError, match="float32"):
        gpu_codec.compress(torch.ones(10, device="cuda", dtype=torch.float16), 0.1, kernels_dir)
    with pytest.raises(ValueError, match="torch CUDA tensor"):
        gpu_codec.compress(torch.ones(10), 0.1, kernels_dir)


def test_misaligned_and_strided_inputs(kernels_dir):
    base = torch.randn(10_001, device="cuda")
    for t in (base[1:], base[3:9003].view(100, 90).t()):
        x = t.contiguous().cpu().numpy().reshape(-1)
        c = gpu_codec.compress(t, 0.01, kernels_dir)
        np.testing.assert_array_equal(gpu_codec.to_cpu(c).payload, codec.compress(x, 0.01).payload)


def test_runs_on_torch_current_stream(kernels_dir):
    x = torch.randn(2**22, device="cuda").relu_()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.empty_like(x)
        y.copy_(x * 1.0)  # queued on s: the codec must wait for it
        c = gpu_codec.compress(y, 0.01, kernels_dir)
        z = gpu_codec.decompress(c, kernels_dir=kernels_dir)
    s.synchronize()
    assert (z - x).abs().max().item() <= 0.01


def test_compressed_memory_is_really_freed(kernels_dir):
    torch.cuda.synchronize()
    x = torch.randn(2**26, device="cuda").relu_()  # 256 MiB, half zeros
    before = torch.cuda.memory_allocated()
    c = gpu_codec.compress(x, 0.05, kernels_dir)
    del x
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before + 2**28
    assert held == pytest.approx(c.nbytes - codec.HEADER_BYTES, abs=2**21)  # allocator rounding only
    assert c.ratio > 4


def _relu_like(shape, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda").relu_()


def _same_stream(a: codec.Compressed, b: codec.Compressed) -> None:
    for name in ("widths", "anchors", "payload", "tile_starts"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


# (N, C, H, W): CIFAR stages, H*W not a multiple of 32, a plane larger than a tile, more channels
# than a CTA has threads, a partial last tile
NHWC_SHAPES = [(3, 16, 32, 32), (4, 64, 8, 8), (2, 5, 7, 7), (1, 3, 100, 100), (2, 300, 8, 4), (5, 3, 6, 6)]


@pytest.mark.parametrize("shape", NHWC_SHAPES, ids=["x".join(map(str, s)) for s in NHWC_SHAPES])
def test_channels_last_kernels_read_and_write_nchw_order(shape, kernels_dir):
    x = _relu_like(shape, sum(shape))
    cl = x.contiguous(memory_format=torch.channels_last)
    for eb in (0.01, 0.0):
        ref = codec.compress(x.cpu().numpy(), eb)  # the twin sees the NCHW values
        c = gpu_codec.compress_source(gpu_codec.Source.nhwc_of(cl), eb, kernels_dir)
        got = gpu_codec.to_cpu(c)
        for name in ("widths", "anchors", "payload"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
        out = torch.empty_like(cl)
        assert gpu_codec.decompress(c, out, kernels_dir) is out and out.is_contiguous(memory_format=torch.channels_last)
        np.testing.assert_array_equal(out.contiguous().cpu().numpy().reshape(-1), codec.decompress(ref))
    with pytest.raises(ValueError, match="channels-last kernels take"):
        gpu_codec.Source.nhwc_of(x)  # NCHW-contiguous: the flat kernels' job


def test_arena_slots_equal_exact_streams(kernels_dir):
    """Every property case (and a channels-last tensor) compressed into one arena back to back:
    each slot's stream equals its exact-size stream, the payloads chain, nothing overflows."""
    sources, ebs = [], []
    for _, x, case_ebs in CASES:
        sources.append(gpu_codec.Source.flat(torch.from_numpy(x.reshape(-1)).cuda()))
        ebs.append(case_ebs[0])
    cl = _relu_like((2, 16, 32, 32), 3).contiguous(memory_format=torch.channels_last)
    sources.append(gpu_codec.Source.nhwc_of(cl))
    ebs.append(0.05)
    exact = [gpu_codec.compress_source(src, eb, kernels_dir) for src, eb in zip(sources, ebs)]
    words = [c.payload.numel() for c in exact]
    buf = arena.Buffer(buffers.layout([src.n for src in sources], words), "cuda")
    max_words = torch.zeros(len(sources), dtype=torch.int64, device="cuda")
    slots = [buf.compress(i, src, eb, max_words.data_ptr() + 8 * i, kernels_dir)
             for i, (src, eb) in enumerate(zip(sources, ebs))]
    assert buf.flags().tolist() == [0, 0]
    assert buf.bases().tolist() == np.concatenate([[0], np.cumsum(words)]).tolist()
    assert max_words.tolist() == words
    for i, (src, c, slot) in enumerate(zip(sources, exact, slots)):
        _same_stream(buf.stream(i, ebs[i]), c)
        out = torch.empty_like(src.tensor)
        assert torch.equal(gpu_codec.decompress(slot, out, kernels_dir), gpu_codec.decompress(c, torch.empty_like(out),
                                                                                              kernels_dir))


def test_arena_overflow_is_flagged_and_nothing_is_written_past_capacity(kernels_dir):
    x = torch.randn(40 * codec.BLOCK + 5, device="cuda")
    x[: 8 * codec.BLOCK] = 0.0  # a first tile of zero-width blocks: it fits even with no capacity
    src = gpu_codec.Source.flat(x)
    exact = gpu_codec.compress_source(src, 0.01, kernels_dir)
    words = exact.payload.numel()
    buf = arena.Buffer(buffers.layout([src.n], [words]), "cuda")
    capacity = words // 2
    payload = buf.tensor[buf.layout.payload:].view(torch.int32)
    payload.fill_(-7)  # the words past `capacity` are a canary
    slot = buf.slot(0, 0.01)._replace(capacity=capacity)
    gpu_codec.launch_compress(src, 0.01, slot, kernels_dir=kernels_dir)
    assert buf.flags().tolist()[0] == 1
    assert bool((payload[capacity:] == -7).all())
    assert torch.equal(buf.stream(0, 0.01).widths, exact.widths)  # metadata is written whatever fits
    y = gpu_codec.decompress(slot, torch.empty_like(x), kernels_dir).cpu().numpy()
    ref = codec.decompress(gpu_codec.to_cpu(exact))
    starts = exact.tile_starts.cpu().numpy()
    ends = np.append(starts[1:], words)
    widths = exact.widths.cpu().numpy()
    for t, end in enumerate(ends):
        lo, hi = t * buffers.TILE_BLOCKS * codec.BLOCK, min((t + 1) * buffers.TILE_BLOCKS * codec.BLOCK, x.numel())
        if end <= capacity:
            np.testing.assert_array_equal(y[lo:hi], ref[lo:hi])
        else:  # did not fit: zeros, except zero-width blocks (their anchor needs no payload)
            keep = np.repeat(widths[lo // codec.BLOCK:-(-hi // codec.BLOCK)] == 0, codec.BLOCK)[:hi - lo]
            np.testing.assert_array_equal(y[lo:hi], np.where(keep, ref[lo:hi], 0))
    assert ends[0] <= capacity < ends[-1]  # both kinds of tile were checked


def test_non_finite_values_in_an_arena_are_stored_raw_and_counted(kernels_dir):
    x = torch.randn(6 * codec.BLOCK, device="cuda")
    x[5], x[2 * codec.BLOCK + 9], x[2 * codec.BLOCK + 10] = float("nan"), float("inf"), -float("inf")
    buf = arena.Buffer.worst_case([x.numel()], "cuda")
    slot = buf.compress(0, gpu_codec.Source.flat(x), 0.05, kernels_dir=kernels_dir)
    assert buf.flags().tolist() == [0, 2]  # two blocks hold NaN/Inf
    widths = buf.stream(0, 0.05).widths.tolist()
    assert widths[0] == widths[2] == codec.RAW
    y = gpu_codec.decompress(slot, torch.empty_like(x), kernels_dir)
    for b in (0, 2):  # bit-exact, NaN included
        sl = slice(b * codec.BLOCK, (b + 1) * codec.BLOCK)
        assert torch.equal(y[sl].view(torch.int32), x[sl].view(torch.int32))
    assert (y - x)[codec.BLOCK:2 * codec.BLOCK].abs().max().item() <= 0.05


def _resnet(seed=0):
    from repro.models import build_model

    torch.manual_seed(seed)
    return build_model("resnet32", num_classes=10).cuda().to(memory_format=torch.channels_last)


@pytest.mark.parametrize("method", ["fixed", "adaptive", "actnn"])
def test_hooks_cut_activation_memory_and_keep_gradients(method, kernels_dir):
    x = torch.randn(256, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (256,), device="cuda")

    def step(model, hooks):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        ctx = hooks.saved_tensors_hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(lambda t: t,
                                                                                                 lambda t: t)
        with ctx:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        held = torch.cuda.memory_allocated() - start
        loss.backward()
        if hooks:
            hooks.after_backward(model)
        peak = torch.cuda.max_memory_allocated() - start
        return held, peak, torch.cat([p.grad.flatten() for p in model.parameters()])

    model = _resnet()
    held0, peak0, g0 = step(model, None)
    hooks = make_hooks(method, eb=0.05, min_numel=4096, kernels_dir=kernels_dir, retune_every=1)
    model = _resnet()
    hooks.wrap_model(model)
    held1, peak1, g1 = step(model, hooks)
    assert held0 / held1 > 2.5, (held0, held1)  # eb 0.05 on N(0, 1) inputs: about 4x on the CPU
    assert peak1 < peak0
    rel = ((g1 - g0).norm() / g0.norm()).item()
    assert rel < (1.0 if method == "actnn" else 0.1), rel


def test_eb_zero_hooks_give_identical_gradients_on_gpu(kernels_dir):
    x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (64,), device="cuda")
    torch.backends.cudnn.deterministic = True
    try:
        grads = []
        for hooks in (None, make_hooks("fixed", eb=0.0, kernels_dir=kernels_dir)):
            model = _resnet()
            if hooks:
                hooks.wrap_model(model)
            ctx = hooks.saved_tensors_hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(lambda t: t,
                                                                                                     lambda t: t)
            with ctx:
                torch.nn.functional.cross_entropy(model(x), y).backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert torch.equal(grads[0], grads[1])
    finally:
        torch.backends.cudnn.deterministic = False


def test_compressor_bench_smoke_on_gpu(kernels_dir, tmp_path):
    from repro.papers.comet.compressor_bench import BenchParams, compressor_bench
    from repro.experiment import Context

    result = compressor_bench(BenchParams(size_mib=64, ebs=[0.05], repeats=3, check_mib=8,
                                          layouts=["flat", "channels_last"]),
                              Context(out_dir=tmp_path, device="cuda", inputs={"kernels": kernels_dir}))
    m = result.metrics
    for kind in ("relu_smooth", "gaussian"):
        assert m[f"stream_match_{kind}"] == m[f"stream_match_channels_last_{kind}"] == 1.0
        assert m[f"arena_match_flat_{kind}"] == m[f"arena_match_channels_last_{kind}"] == 1.0
    assert m["max_err_over_eb"] <= 1.0 and m["compress_gbps"] > 0 and m["copy_gbps"] > 0
    assert m["compress_exact_gbps"] > 0 and m["compress_gbps_channels_last"] > 0


def _batch(n: int = 64, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, 3, 32, 32, generator=g, device="cuda").contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 10, (n,), generator=g, device="cuda")


def _fwd_bwd(model, hooks, x, y):
    model.zero_grad(set_to_none=True)
    with hooks.saved_tensors_hooks():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    hooks.after_backward(model)
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_arena_step_equals_exact_step_and_reserves_what_it_counts(kernels_dir):
    x, y = _batch()
    exact = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir)
    model_e = _resnet()
    exact.wrap_model(model_e)
    hooks = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir, payload="arena")
    model = _resnet()
    hooks.wrap_model(model)
    torch.backends.cudnn.deterministic = True
    try:
        g_exact = _fwd_bwd(model_e, exact, x, y)
        _fwd_bwd(model, hooks, x, y)  # calibration: exact sizes, then a plan
        plan = hooks.planner.plan
        assert plan is not None and hooks.planner.totals["plans"] == 1
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with hooks.saved_tensors_hooks():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        held = torch.cuda.memory_allocated() - before
        stored = hooks.step_stored_bytes
        model.zero_grad(set_to_none=True)
        loss.backward()
        hooks.after_backward(model)
        g_arena = torch.cat([p.grad.flatten() for p in model.parameters()])
    finally:
        torch.backends.cudnn.deterministic = False
    assert torch.equal(g_arena, g_exact)  # the arena's streams decode to the same values
    assert stored >= plan.layout.total_bytes and held == pytest.approx(stored, abs=2**21)
    assert plan.counters.tolist() == [0, 0, 1]


def test_overflowing_step_is_voided_and_replanned(kernels_dir):
    x, y = _batch()
    hooks = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir, payload="arena")
    model = _resnet()
    hooks.wrap_model(model)
    _fwd_bwd(model, hooks, x, y)
    planner = hooks.planner
    counts = planner.plan.layout.counts
    planner.plan = planner._new_plan(counts, [0] * len(counts))  # no payload room at all
    grads = _fwd_bwd(model, hooks, x, y)
    assert planner.plan.counters.tolist()[:2] == [1, 0] and bool((grads == 0).all())
    row = planner.replan()
    assert row["codec_overflow_steps"] == 1 and planner.version == 2
    grads = _fwd_bwd(model, hooks, x, y)
    assert planner.plan.counters.tolist() == [0, 0, 1] and grads.abs().sum().item() > 0


def test_train_step_with_arena_hooks_runs_as_a_cuda_graph(kernels_dir):
    """Warm-up (calibration, then arena steps), capture and replays; lr 0 keeps the weights, so the
    replays' gradients equal an eager exact-payload step's."""
    from repro.train.step import TrainStep

    x, y = _batch()
    hooks = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir, payload="arena")
    model = _resnet()
    hooks.wrap_model(model)
    opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.0, device="cuda"), momentum=0.9, fused=True)
    torch.backends.cudnn.deterministic = True
    try:
        step = TrainStep(model, opt, hooks, device="cuda", cuda_graph=True)
        for _ in range(6):
            step(x, y)
        torch.cuda.synchronize()
        assert step.mode == "cudagraph" and step.captures == 1, step.notes
        g_graph = torch.cat([p.grad.flatten() for p in model.parameters()])
        exact = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir)
        model_e = _resnet()
        model_e.load_state_dict(model.state_dict())
        exact.wrap_model(model_e)
        g_eager = _fwd_bwd(model_e, exact, x, y)
    finally:
        torch.backends.cudnn.deterministic = False
    torch.testing.assert_close(g_graph, g_eager, rtol=1e-4, atol=1e-6)
    overflows, nonfinite, planned = hooks.planner.plan.counters.tolist()
    assert (overflows, nonfinite) == (0, 0) and planned == 5  # warm-up steps 2-3 and three replays


def test_step_bench_smoke_on_gpu(kernels_dir, tmp_path):
    from repro.papers.comet.step_bench import StepBenchParams, step_bench
    from repro.experiment import Context

    p = StepBenchParams(model="resnet20", model_kw={"width": 4}, batch_size=32, methods=["none", "fixed"],
                        payloads=["exact", "arena"], graph_methods=["none", "fixed"], warmup=5, steps=3, rounds=1)
    m = step_bench(p, Context(out_dir=tmp_path, device="cuda", inputs={"kernels": kernels_dir})).metrics
    for key in ("fixed", "fixed_arena", "fixed_cudagraph"):
        assert m[f"images_per_s_{key}"] > 0
    assert m["host_codec_ms_fixed_cudagraph"] < m["host_codec_ms_fixed_arena"] < m["host_codec_ms_fixed"]
    assert m["codec_overflow_steps_fixed_cudagraph"] == 0 and m["speed_ratio_none_cudagraph"] == 1.0


# ---- codec v4 ----------------------------------------------------------------------------------


def assert_same_stream_v4(x: np.ndarray, eb: float, kernels_dir: Path, book: codec_v4.Book | None = None) -> None:
    ref, ref_hists = codec_v4.encode(x, eb, book)
    got_dev, hists = gpu_codec_v4.encode(torch.from_numpy(x.reshape(-1)).cuda(), eb, kernels_dir, book)
    np.testing.assert_array_equal(hists, ref_hists)
    got = gpu_codec_v4.to_cpu(got_dev)
    assert got.mode == ref.mode and got_dev.book is book
    np.testing.assert_array_equal(got.lengths, ref.lengths)
    np.testing.assert_array_equal(got.offsets, ref.offsets)
    np.testing.assert_array_equal(got.payload, ref.payload)
    assert got_dev.nbytes == ref.nbytes
    y = gpu_codec_v4.decompress(got_dev, kernels_dir=kernels_dir).cpu().numpy()
    np.testing.assert_array_equal(y.view(np.uint32), codec_v4.decompress(ref).view(np.uint32))
    assert np.abs(x.reshape(-1).astype(np.float64) - y).max(initial=0) <= np.float32(eb)
    back = gpu_codec_v4.to_gpu(ref, "cuda")  # the GPU decoder reads the twin's stream
    np.testing.assert_array_equal(gpu_codec_v4.decompress(back, kernels_dir=kernels_dir).cpu().numpy(), y)
    if book is not None:  # and a stream coded with a book decodes from its stored lengths alone
        bare = codec_v4.CompressedV4(back.n, back.eb, back.mode, ref.lengths.copy(), back.offsets, back.payload)
        np.testing.assert_array_equal(gpu_codec_v4.decompress(bare, kernels_dir=kernels_dir).cpu().numpy(), y)


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_v4_gpu_stream_equals_twin_stream(name, x, ebs, kernels_dir):
    for eb in ebs + [0.0]:
        assert_same_stream_v4(x, eb, kernels_dir)


@pytest.mark.parametrize("n", [1, 3, 4, 127, 1023, 1024, 1025, 4097, 3 * 2**20 + 5])
def test_v4_sizes(n, kernels_dir):
    rng = np.random.default_rng(n)
    x = np.maximum(rng.standard_normal(n), 0).astype(np.float32)
    for eb in (0.02, 0.5):
        assert_same_stream_v4(x, eb, kernels_dir)


def test_v4_escapes_and_both_modes(kernels_dir):
    n = 8 * 1024
    x = np.zeros(n, dtype=np.float32)
    x[10], x[11] = 5000.0, -3000.0  # escapes
    x[2048:4096] = np.linspace(-40, 40, 2048)
    assert_same_stream_v4(x, 0.01, kernels_dir)
    rng = np.random.default_rng(2)
    spiky = np.where(rng.random(n) < 0.3, 0.25, 0.0).astype(np.float32)
    assert codec_v4.compress(spiky, 0.5).mode == codec_v4.DIRECT
    assert_same_stream_v4(spiky, 0.5, kernels_dir)


def test_v4_empty_and_non_finite(kernels_dir):
    c = gpu_codec_v4.compress(torch.zeros(0, device="cuda"), 0.1, kernels_dir)
    assert c.n == 0 and gpu_codec_v4.decompress(c, kernels_dir=kernels_dir).numel() == 0
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = torch.ones(5000, device="cuda")
        x[4321] = bad
        with pytest.raises(ValueError, match="non-finite"):
            gpu_codec_v4.compress(x, 0.1, kernels_dir)


def test_v4_large_round_trip_holds_the_bound(kernels_dir):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.relu(torch.randn(2**24 + 77, generator=gen, device="cuda"))
    for eb in (0.01, 0.2):
        c = gpu_codec_v4.compress(x, eb, kernels_dir)
        y = gpu_codec_v4.decompress(c, kernels_dir=kernels_dir)
        assert float((x.double() - y.double()).abs().max()) <= eb
        assert c.ratio > 4


def test_v4_hooks_keep_gradients_close(kernels_dir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 32 * 32, 10)).cuda()
    x = torch.randn(8, 3, 32, 32, device="cuda")
    model(x).square().sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    hooks = make_hooks("fixed", eb=1e-3, kernels_dir=kernels_dir, codec_version="v4")
    hooks.wrap_model(model)
    with hooks.saved_tensors_hooks():
        model(x).square().sum().backward()
    assert 0 < hooks.step_stored_bytes < hooks.step_raw_bytes / 2
    g0, g1 = torch.cat([g.flatten() for g in ref]), torch.cat([p.grad.flatten() for p in model.parameters()])
    assert ((g1 - g0).norm() / g0.norm()).item() < 0.05


def _book() -> codec_v4.Book:
    """A covering book built from one small tensor (relu_sparse at eb 0.1: a few dozen symbols seen)."""
    return codec_v4.make_book(codec_v4.encode(CASES[3][1], 0.1)[1])


@pytest.mark.parametrize("name,x,ebs", CASES, ids=[c[0] for c in CASES])
def test_v4_cached_book_stream_equals_twin_stream(name, x, ebs, kernels_dir):
    book = _book()
    for eb in ebs + [0.0]:
        assert_same_stream_v4(x, eb, kernels_dir, book)
    assert_same_stream_v4(np.zeros(3 * 1024 + 5, dtype=np.float32), 0.1, kernels_dir, book)
    assert ("cuda", torch.cuda.current_device()) in book.device  # its device tensors, made once


def test_v4_cached_book_large_round_trip_and_one_host_sync(kernels_dir):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.relu(torch.randn(2**22 + 77, generator=gen, device="cuda"))
    book = codec_v4.make_book(gpu_codec_v4.encode(x, 0.05, kernels_dir)[1])
    x2 = torch.relu(torch.randn(2**22 + 77, generator=gen, device="cuda"))  # a later step's tensor
    gpu_codec_v4.encode(x2, 0.05, kernels_dir, book)  # the book's device tensors and the kernels load here

    def syncs(fn) -> int:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        return sum("synchroniz" in str(w.message) for w in caught)

    assert syncs(lambda: gpu_codec_v4.encode(x2, 0.05, kernels_dir, book)) == 1
    assert syncs(lambda: gpu_codec_v4.encode(x2, 0.05, kernels_dir)) >= 2
    c2, hists2 = gpu_codec_v4.encode(x2, 0.05, kernels_dir, book)
    y = gpu_codec_v4.decompress(c2, kernels_dir=kernels_dir)
    assert float((x2.double() - y.double()).abs().max()) <= 0.05
    own = gpu_codec_v4.compress(x2, 0.05, kernels_dir)
    assert c2.nbytes <= 1.05 * own.nbytes  # a same-distribution book: within 5% of the tensor's own
    assert book.drift(hists2) <= 1.05  # the hooks would keep it


def test_v4_cached_book_refuses_non_finite_and_uncovered_symbols(kernels_dir):
    book = _book()
    for bad in (float("nan"), float("inf")):
        x = torch.ones(5000, device="cuda")
        x[4321] = bad
        with pytest.raises(ValueError, match="non-finite values: 1 NaN/Inf"):
            gpu_codec_v4.encode(x, 0.1, kernels_dir, book)
    own = codec_v4.Book(*codec_v4.choose(codec_v4.encode(CASES[3][1], 0.1)[1]))  # not covering
    with pytest.raises(ValueError, match="no code for"):
        gpu_codec_v4.encode(torch.from_numpy(CASES[0][1]).cuda(), 1e-4, kernels_dir, own)


def test_v4_hooks_with_cached_books_train_like_v3(kernels_dir):
    """Three SGD steps, books built on the first and used on the others: v3's losses and weights (v4
    decodes to v3's values; a block a stale book makes too big is stored exact), close to uncompressed."""

    def run(hooks):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                    torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(16 * 32 * 32, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if hooks:
            hooks.wrap_model(model)
        gen = torch.Generator(device="cuda").manual_seed(0)
        losses = []
        for _ in range(3):
            x = torch.randn(32, 3, 32, 32, generator=gen, device="cuda")
            y = torch.randint(0, 10, (32,), generator=gen, device="cuda")
            opt.zero_grad(set_to_none=True)
            ctx = hooks.saved_tensors_hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(lambda t: t,
                                                                                                     lambda t: t)
            with ctx:
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if hooks:
                hooks.after_backward(model)
            opt.step()
            losses.append(loss.item())
        return torch.tensor(losses), torch.cat([p.detach().flatten() for p in model.parameters()])

    torch.backends.cudnn.deterministic = True
    try:
        v4 = make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir, codec_version="v4")
        l4, w4 = run(v4)
        l3, w3 = run(make_hooks("fixed", eb=0.05, kernels_dir=kernels_dir))
        l0, w0 = run(None)
    finally:
        torch.backends.cudnn.deterministic = False
    torch.testing.assert_close(l4, l3, rtol=1e-5, atol=0)
    torch.testing.assert_close(w4, w3, rtol=1e-4, atol=1e-6)
    assert ((l4 - l0).abs() / l0).max() < 0.05
    m = v4.codec_metrics()
    slots = len(v4.books.books)
    assert slots >= 3 and m["codec_books_built"] == slots and m["codec_book_tensors"] == 2 * slots
