"""The GPU codec and the hooks on a CUDA GPU: streams bit-identical to the NumPy codec on every
property-test input, the bound, bad input, layouts and alignment, streams, the memory really
freed in training, and the experiments at smoke size.

Kernels come from $REPRO_KERNELS_DIR (a `snakemake build_kernels` output) or are compiled here
with nvcc into a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

from cases import cases  # noqa: E402
from repro.build_kernels import build  # noqa: E402
from repro.comet import codec, gpu_codec  # noqa: E402
from repro.comet.hooks import make_hooks  # noqa: E402

pytestmark = pytest.mark.gpu

KERNELS = Path(gpu_codec.__file__).resolve().parent / "kernels"
CASES = cases()


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    if os.environ.get("REPRO_KERNELS_DIR"):
        return Path(os.environ["REPRO_KERNELS_DIR"])
    out = tmp_path_factory.mktemp("kernels")
    manifest = build(out, srcs=[KERNELS / "comet_codec.cu"])
    if manifest["status"] != "built":
        pytest.fail(f"cannot compile the kernels here ({manifest['reason']}); set REPRO_KERNELS_DIR")
    return out


def assert_same_stream(x: np.ndarray, eb: float, kernels_dir: Path) -> None:
    ref = codec.compress(x, eb)
    got_dev = gpu_codec.compress(torch.from_numpy(x.reshape(-1)).cuda(), eb, kernels_dir)
    got = gpu_codec.to_cpu(got_dev)
    np.testing.assert_array_equal(got.widths, ref.widths)
    np.testing.assert_array_equal(got.anchors, ref.anchors)
    np.testing.assert_array_equal(got.payload, ref.payload)
    assert got_dev.nbytes == ref.nbytes
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
    from repro.comet.compressor_bench import BenchParams, compressor_bench
    from repro.experiment import Context

    result = compressor_bench(BenchParams(size_mib=64, ebs=[0.05], repeats=3, check_mib=8),
                              Context(out_dir=tmp_path, device="cuda", inputs={"kernels": kernels_dir}))
    m = result.metrics
    assert m["stream_match_relu_smooth"] == 1.0 and m["stream_match_gaussian"] == 1.0
    assert m["max_err_over_eb"] <= 1.0 and m["compress_gbps"] > 0 and m["copy_gbps"] > 0
