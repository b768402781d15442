"""Inference latency on the CPU: the im2col / GEMM layout against torch's conv, the 2:4 groups
landing on consecutive K entries, channel compaction, and the experiment end to end at smoke size
(its timings mean nothing; the 2:4 matmul needs CUDA, so those rows record why they are empty)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import prepared_splits
from repro import records
from repro.papers.clicktrain import figures
from repro.papers.clicktrain.experiment import (ADMMParams, ClickTrainParams, PruneTrainParams, Sparse24Params, admm,
                                         clicktrain, prunetrain, sparse24)
from repro.papers.clicktrain.inference import (CompactConv, GemmConv, InferenceParams, channel_support, gemm_weight, im2col,
                                        inference, out_size, sparse24_weight)
from repro.papers.clicktrain.masks import sparse24_mask
from repro.experiment import Context, NeedsGPU

GEOMETRIES = [(3, 1, 1), (3, 2, 1), (1, 1, 0), (1, 2, 0)]  # (kernel, stride, padding)


def _conv(cin, cout, kernel, stride, padding, seed=0) -> nn.Conv2d:
    torch.manual_seed(seed)
    return nn.Conv2d(cin, cout, kernel, stride, padding, bias=False).double()


def _x(n, c, h, w, seed=1) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(n, c, h, w, dtype=torch.float64).contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernel,stride,padding", GEOMETRIES)
def test_im2col_gemm_equals_conv(kernel, stride, padding):
    conv, x = _conv(8, 12, kernel, stride, padding), _x(2, 8, 9, 7)
    cols = im2col(x, conv.kernel_size, conv.stride, conv.padding)
    ho, wo = out_size(conv.kernel_size, conv.stride, conv.padding, 9, 7)
    assert cols.shape == (2 * ho * wo, kernel * kernel * 8)
    y = (cols @ gemm_weight(conv.weight.detach()).T).view(2, ho, wo, 12).permute(0, 3, 1, 2)
    torch.testing.assert_close(y, conv(x))
    with torch.no_grad():
        out = GemmConv(conv, gemm_weight(conv.weight)).forward(x)
    torch.testing.assert_close(out, conv(x))
    assert out.is_contiguous(memory_format=torch.channels_last)  # as cuDNN's channels-last output


def test_one_by_one_conv_is_a_plain_matmul_on_the_nhwc_view():
    x = _x(2, 8, 5, 5)
    cols = im2col(x, (1, 1), (1, 1), (0, 0))
    assert cols.data_ptr() == x.data_ptr()  # no copy


def test_sparse24_groups_are_consecutive_k_entries():
    """The arm's 2:4 mask groups 4 input channels at one kernel position; in im2col's K order those
    are 4 consecutive entries, the layout the 2:4 tensor cores need."""
    torch.manual_seed(0)
    weight = torch.randn(32, 16, 3, 3)
    w2d = gemm_weight(weight * sparse24_mask(weight))
    groups = (w2d.reshape(32, -1, 4) != 0).sum(-1)
    assert int(groups.max()) == 2 and w2d.shape == (32, 144)


def test_sparse24_weight_reports_why_not_instead_of_raising():
    reason = sparse24_weight(torch.zeros(32, 64))
    assert isinstance(reason, str) and "CUDA" in reason


def test_channel_support_and_compact_conv():
    conv, x = _conv(8, 12, 3, 1, 1), _x(2, 8, 6, 6)
    with torch.no_grad():
        conv.weight[[1, 5]] = 0  # output channels 1 and 5 lost every kernel
        conv.weight[:, [0, 3, 7]] = 0  # no kept kernel reads input channels 0, 3, 7
    keep_out, keep_in = channel_support(conv.weight)
    assert keep_out.tolist() == [0, 2, 3, 4, 6, 7, 8, 9, 10, 11] and keep_in.tolist() == [1, 2, 4, 5, 6]
    compact = CompactConv(conv)
    assert tuple(compact.conv.weight.shape) == (10, 5, 3, 3)
    with torch.no_grad():
        torch.testing.assert_close(compact(x), conv(x))
        assert compact(x)[:, [1, 5]].abs().max() == 0


def test_compact_conv_without_removable_channels_is_the_conv():
    conv, x = _conv(4, 4, 3, 2, 1), _x(1, 4, 8, 8)
    compact = CompactConv(conv)
    assert compact.keep_out is None and compact.keep_in is None
    with torch.no_grad():
        torch.testing.assert_close(compact(x), conv(x))


TINY = dict(model="resnet20", model_kw={"width": 4}, batch_size=32, n_train=128, channels_last=False,
            checkpoint=False)
ARMS = {"clicktrain": (clicktrain, ClickTrainParams(**TINY, epochs=3)),
        "admm": (admm, ADMMParams(**TINY, epochs=1, admm_epochs=1, retrain_epochs=1)),
        "prunetrain": (prunetrain, PruneTrainParams(**TINY, epochs=2, channel_threshold=1.5)),
        "sparse24": (sparse24, Sparse24Params(**TINY, epochs=2))}


@pytest.fixture(scope="module")
def arm_records(tmp_path_factory) -> dict[str, Path]:
    """The four arms trained at tiny size, each with a run record beside its pruned.pt."""
    root = tmp_path_factory.mktemp("arms")
    prepared = prepared_splits(root, 160, 64)
    out = {}
    for name, (fn, params) in ARMS.items():
        d = root / name
        result = fn(params, Context(out_dir=d, scale="smoke", device="cpu", seed=1, inputs=prepared))
        out[name] = records.write(d, dict(experiment=name, paper="clicktrain", scale="smoke", status="ok", params={},
                                          metrics={k: float(v) for k, v in result.metrics.items()}, provenance={},
                                          started="2025-01-01T00:00:00+00:00", artifacts={"pruned": "pruned.pt"}))
    return out


SMOKE = InferenceParams(batch_sizes=[2], dtypes=["fp32"], warmup=1, repeats=2)


def test_inference_smoke_end_to_end(arm_records, tmp_path):
    result = inference(SMOKE, Context(out_dir=tmp_path, scale="smoke", device="cpu", inputs=arm_records))
    layers, network, m = result.tables["layers"], result.tables["network"], result.metrics
    convs = layers.layer.nunique()
    assert set(layers.method) == {"cudnn", "im2col", "gemm_dense", "im2col_gemm_dense", "gemm_24", "im2col_gemm_24",
                                  "compact", "compact_scatter"}
    assert (layers[layers.method == "compact_scatter"].groupby("arm").size() == convs).all()
    # every path that ran computes what the dense conv / network computes
    assert layers.rel_err.dropna().max() < 1e-5 and network.rel_err.dropna().max() < 1e-5
    sparse_rows = layers[layers.method == "gemm_24"]
    assert sparse_rows.time_s.isna().all() and sparse_rows.status.str.contains("CUDA").all()
    assert set(network.variant) == {"cudnn", "compact", "gemm_dense", "gemm_24"}
    assert network[network.variant == "gemm_24"].time_s.isna().all()  # no conv could take the 2:4 form
    assert (network["mode"] == "eager").all() and m["graph_mode"] == 0
    # what the masks promise against what vanishes whole: 2:4 removes no channel, PruneTrain only channels
    assert m["flops_ratio_clicktrain"] > 5 and m["compact_flops_ratio_sparse24"] == 1.0
    assert m["compact_flops_ratio_prunetrain"] == pytest.approx(m["flops_ratio_prunetrain"])
    assert m["flops_ratio_clicktrain"] > m["compact_flops_ratio_clicktrain"] >= 1.0
    assert "speedup_clicktrain_compact_b2_fp32" in m and "speedup_sparse24_gemm_24_b2_fp32" not in m
    assert "mean nothing" in result.tags["timing"]
    for name, table in result.tables.items():
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    assert len(figures.inference(tmp_path).axes) >= 3


def test_inference_needs_a_gpu_at_paper_scale(arm_records, tmp_path):
    with pytest.raises(NeedsGPU, match="CUDA GPU"):
        inference(InferenceParams(), Context(out_dir=tmp_path, scale="paper", device="cpu", inputs=arm_records))


def test_inference_names_a_missing_arm(arm_records, tmp_path):
    inputs = {k: v for k, v in arm_records.items() if k != "admm"}
    with pytest.raises(records.RecordError, match="inputs.admm is missing"):
        inference(SMOKE, Context(out_dir=tmp_path, scale="smoke", device="cpu", inputs=inputs))


def test_gemm_conv_refuses_what_im2col_does_not_model():
    with pytest.raises(ValueError, match="groups 1"):
        GemmConv(nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.zeros(8, 36))
    with pytest.raises(ValueError, match="without bias"):
        CompactConv(nn.Conv2d(8, 8, 3, padding=1))


def test_out_size_matches_conv():
    conv, x = _conv(3, 4, 3, 2, 1), _x(1, 3, 11, 10)
    assert out_size(conv.kernel_size, conv.stride, conv.padding, 11, 10) == tuple(F.conv2d(
        x, conv.weight, stride=2, padding=1).shape[2:])
