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
