"""repro.kernels: where cubins are looked for, and what a missing build says."""

from pathlib import Path

import pytest

from repro import kernels


def test_missing_cubin_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match="snakemake build_kernels"):
        kernels.module("tsm2r", 0, tmp_path)


def test_default_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path))
    assert kernels.default_dir() == tmp_path
    monkeypatch.delenv("REPRO_KERNELS_DIR")
    assert kernels.default_dir() == Path.cwd() / "results" / "build" / "kernels"


def test_the_module_cache_follows_the_folder_the_variable_names(monkeypatch, tmp_path):
    """Without a folder argument, a module loaded while $REPRO_KERNELS_DIR named one build is not served
    once it names another (a fake CuPy records which cubin each load read)."""
    import sys
    import types
    from contextlib import nullcontext

    loads = []
    cuda = types.SimpleNamespace(Device=lambda device: nullcontext())
    fake = types.SimpleNamespace(cuda=cuda, RawModule=lambda path: loads.append(path) or path)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels, "_MODULES", {})
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "k.cubin").write_bytes(b"")
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path / "a"))
    assert kernels.module("k", 0) == str(tmp_path / "a" / "k.cubin")
    assert kernels.module("k", 0) == str(tmp_path / "a" / "k.cubin") and len(loads) == 1  # a hit
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path / "b"))
    assert kernels.module("k", 0) == str(tmp_path / "b" / "k.cubin")
    assert loads == [str(tmp_path / "a" / "k.cubin"), str(tmp_path / "b" / "k.cubin")]
