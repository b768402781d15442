"""AIDA's GPU context (no verdict): the pruned layers' construction, the checks, and the experiment on
the CPU (the GPU path is the same code with CUDA events; a GPU test runs it on fp16 too)."""

import numpy as np
import pytest

from repro.experiment import Context
from repro.papers.aida import ap_model
from repro.papers.aida.gpu_context import ContextParams, gpu_context, pruned_csr, scaled_layers


def test_pruned_csr_has_the_density_and_a_valid_structure():
    layer = ap_model.Layer("x", 300, 200, 0.09)
    crow, col, val = pruned_csr(layer, np.random.default_rng(1))
    assert crow[0] == 0 and crow[-1] == round(300 * 200 * 0.09) == len(col) == len(val)
    assert len(crow) == 201 and np.all(np.diff(crow) >= 0)
    for r in range(200):  # columns sorted and distinct within each row
        c = col[crow[r]:crow[r + 1]]
        assert np.all(np.diff(c) > 0) and (c.size == 0 or (c[0] >= 0 and c[-1] < 300))


def test_scaled_layers_and_bad_input():
    layers = scaled_layers(ContextParams(layers=["VGG-6", "Alex-8"], scale=0.5))
    assert [(l.name, l.n_in, l.n_out) for l in layers] == [("VGG-6", 12544, 2048), ("Alex-8", 2048, 500)]
    with pytest.raises(ValueError, match="unknown"):
        scaled_layers(ContextParams(layers=["VGG-9"]))
    with pytest.raises(ValueError, match="scale"):
        scaled_layers(ContextParams(scale=0.0))


def _run(tmp_path, device="cpu", **kw):
    p = ContextParams(scale=0.05, dtypes=["float32", "float16"], calls=1, repeats=2, **kw)
    return gpu_context(p, Context(out_dir=tmp_path, device=device))


def test_cpu_run_measures_every_layer_beside_the_models(tmp_path):
    result = _run(tmp_path)
    df = result.tables["layers"]
    assert list(df["layer"]) == [layer.name for layer in ap_model.EIE_LAYERS]  # fp16 left out on the CPU
    assert (df["spmv_s"] > 0).all() and (df["gemv_s"] > 0).all() and (df["rel_err"] < 1e-4).all()
    eie = ContextParams().eie
    for row in df.itertuples():  # the modelled times are the model's for the same (scaled) layer
        layer = ap_model.Layer(row.layer, row.n_in, row.n_out, row.weight_density)
        assert row.eie_model_s == pytest.approx(ap_model.eie_layer(layer, eie)["eie_s"])
        assert row.eie_over_spmv == pytest.approx(row.eie_model_s / row.spmv_s)
    assert result.metrics["float32_eie_model_over_spmv_geomean"] == pytest.approx(
        float(np.exp(np.log(df["eie_over_spmv"]).mean())))
    assert result.tags["kind"] == "context"


@pytest.mark.gpu
def test_gpu_run_both_dtypes(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (run on the GPU machine)")
    df = _run(tmp_path, device="cuda").tables["layers"]
    assert set(df["dtype"]) == {"float32", "float16"} and len(df) == 12
