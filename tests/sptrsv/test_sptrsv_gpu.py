"""SpTRSV on a GPU: every single-GPU solver against SciPy (fp64, 1e-10 relative) with its output
poisoned first, repeated solves, the benchmark end to end at a tiny size, and on 2+ GPUs both
multi-GPU designs. Kernels come from $REPRO_KERNELS_DIR or are compiled here with nvcc."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import re

import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve_triangular

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

from repro.experiment import Context  # noqa: E402
from repro.data import matrices as M  # noqa: E402
from repro.papers.sptrsv import multi  # noqa: E402
from repro.papers.sptrsv.experiment import MultiGPUParams, SingleGPUParams, multi_gpu, single_gpu  # noqa: E402
from repro.papers.sptrsv.solve import solvers, upload  # noqa: E402
from conftest import built_kernels  # noqa: E402

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).resolve().parents[2] / "src" / "repro" / "papers" / "sptrsv" / "kernels"
CASES = {"poisson2d": lambda: M.poisson((90, 70)), "poisson3d_ilu0": lambda: M.poisson((20, 18, 16), "ilu0"),
         "powerlaw": lambda: M.powerlaw(60000, seed=1, min_offset=40), "banded": lambda: M.banded(8000),
         "bar": lambda: M.gallery("bar"), "chain": lambda: M.gallery("knot"),
         # one long chain: every warp of v3 runs 32 rounds, one row each
         "bidiagonal": lambda: sp.diags([np.full(5000, 2.0), np.full(4999, -1.0)], [0, -1], format="csr"),
         # rows with up to 24 dependencies inside their warp: past v4's eight cached ones (its v3 path)
         "dense_band": lambda: M.banded(3000, bandwidth=24, density=1.0)}


@pytest.fixture(scope="session")
def kernels_dir(tmp_path_factory) -> Path:
    return built_kernels(tmp_path_factory, sorted(KERNELS.glob("*.cu")))


@pytest.mark.parametrize("case", list(CASES))
def test_every_solver_matches_scipy(case, kernels_dir):
    L = CASES[case]()
    b = np.random.default_rng(0).standard_normal(L.shape[0])
    ref = spsolve_triangular(L, b, lower=True)
    m = upload(L)
    made = solvers(m, cupy.asarray(b), kernels_dir)
    assert {"syncfree_push", "syncfree_pull", "syncfree_v3", "syncfree_v4"} <= made.keys()
    for name, s in made.items():
        s.analyse()
        for _ in range(3):  # counters, sums and tickets must reset between solves
            s.x.fill(math.nan)
            s.solve()
            err = float(np.abs(cupy.asnumpy(s.x) - ref).max() / np.abs(ref).max())
            assert err <= 1e-10, f"{case} {name}: {err:.3g}"
        if hasattr(s, "check"):
            s.check()
    made["cusparse"].close()


@pytest.mark.parametrize("variant", ["warp", "thread", "levels", "push"])
def test_a_stalled_solve_ends_with_an_error(variant, kernels_dir, monkeypatch):
    from repro.papers.sptrsv import solve

    monkeypatch.setattr(solve, "SPIN_LIMIT_CYCLES", 10**6)
    L = M.poisson((30, 20))
    make = solve.SyncFreeV2 if variant == "push" else solve.SyncFree
    s = make(upload(L), cupy.ones(600), kernels_dir, variant)
    s.analyse()
    s.need[17] += 1  # a dependency that never comes
    s.solve()
    with pytest.raises(RuntimeError, match=r"row (\d+) waited more than .* the solve stalled") as err:
        s.check()
    # the row named is 17 or one that waits on it, whichever spun out first
    waiting, todo, lower = {17}, [17], L.tocsc()
    while todo:
        j = todo.pop()
        for i in lower.indices[lower.indptr[j]:lower.indptr[j + 1]]:
            if i > j and i not in waiting:
                waiting.add(int(i))
                todo.append(int(i))
    assert int(re.search(r"row (\d+) waited", str(err.value)).group(1)) in waiting


def test_single_gpu_experiment_tiny(tmp_path, kernels_dir):
    p = SingleGPUParams(matrices=[{"name": "p", "kind": "poisson", "shape": [64, 48]},
                                  {"name": "k", "kind": "gallery", "example": "knot"}],
                        warmup=1, repeats=3, analysis_repeats=2, target_s=0.01)
    r = single_gpu(p, Context(out_dir=tmp_path, scale="smoke", device="cuda", inputs={"kernels": kernels_dir}))
    assert r.metrics["n_incorrect"] == 0 and r.metrics["n_matrices"] == 2
    pts = r.tables["points"]
    assert (pts["cusparse_solve_ms"] > 0).all() and (pts["speedup_syncfree_thread"] > 0).all()
    assert (pts["ceiling_ms"] == pts["levels"] * r.metrics["hop_us"] / 1e3).all()
    assert r.metrics["geomean_ceiling_speedup_deep"] > 0


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_level_analysis_equals_the_host_one(case, kernels_dir):
    from repro.papers.sptrsv import schedule
    from repro.papers.sptrsv.solve import device_levels

    L = CASES[case]()
    a = schedule.analyse(L)
    level, perm, level_ptr, pos = (cupy.asnumpy(v) for v in device_levels(upload(L), kernels_dir))
    assert np.array_equal(level, a.level) and np.array_equal(perm, a.perm)
    assert np.array_equal(level_ptr, a.level_ptr) and np.array_equal(pos[perm], np.arange(L.shape[0]))


def test_hop_latency(kernels_dir):
    """One dependency between two blocks carries its value every hop and costs between 0.1 and 20 us
    (about 1.1 us on an idle H100)."""
    from repro.papers.sptrsv.bench import hop_latency

    hop = hop_latency(kernels_dir, rounds=2000, repeats=3)
    assert 0.1 < hop["hop_us_min"] <= hop["hop_us"] <= hop["hop_us_max"] < 20


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@two_gpus
@pytest.mark.parametrize("entry", [{"name": "p", "kind": "poisson", "shape": [90, 70]},
                                   {"name": "w", "kind": "powerlaw", "n": 60000, "min_offset": 40},
                                   {"name": "g", "kind": "gallery", "example": "bar"}], ids=lambda e: e["kind"])
def test_multi_gpu_designs_match(entry, kernels_dir):
    spec = M.specs([entry])[0]
    L = spec.build()
    b = np.random.default_rng(4).standard_normal(L.shape[0])
    for level_order in (False, True):
        timing = {"kernels_dir": kernels_dir, "warmup": 1, "repeats": 2, "grain": 3, "blocks_per_sm": 2,
                  "level_order": level_order}
        zc = multi.zero_copy([spec], [4], 2, **timing)[0]
        um = multi.unified_memory(L, b, 2, **timing)
        assert multi.backward_error(L, zc["x"], b) <= 1e-12 and zc["solve_s"] > 0
        assert um["backward"] <= 1e-12 and um["solve_s"] > 0


@two_gpus
def test_multi_gpu_experiment_tiny(tmp_path, kernels_dir):
    p = MultiGPUParams(matrices=[{"name": "p", "kind": "poisson", "shape": [60, 40]}], warmup=1, repeats=2,
                       scaling=[1])
    r = multi_gpu(p, Context(out_dir=tmp_path, scale="smoke", device="cuda", gpus=2,
                             inputs={"kernels": kernels_dir}))
    assert r.metrics["n_incorrect"] == 0 and r.metrics["gpus"] == 2
    assert set(r.tables["points"]["gpus"]) == {1, 2} and "geomean_speedup_1gpu" in r.metrics


@pytest.mark.parametrize("case", list(CASES))
def test_v4_gives_v3s_x_exactly(case, kernels_dir):
    """v4 caches what v3 re-reads and subtracts in the same order: the same x, bit for bit."""
    L = CASES[case]()
    m = upload(L)
    b = cupy.asarray(np.random.default_rng(1).standard_normal(L.shape[0]))
    made = solvers(m, b, kernels_dir, methods=("syncfree_v3", "syncfree_v4"))
    for s in made.values():
        s.analyse()
        s.solve()
        s.check()
    assert cupy.array_equal(made["syncfree_v3"].x, made["syncfree_v4"].x)

