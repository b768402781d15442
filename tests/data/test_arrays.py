"""Prepared split files: round trip, and the errors for missing, truncated, unchecked files."""

from __future__ import annotations

import numpy as np
import pytest

from repro.data.arrays import DataError, Split, read_split, write_split
from repro.atomic import atomic_write
from repro.data.synthetic import synthetic_split


def test_round_trip(tmp_path):
    split = synthetic_split(30)
    digest = write_split(tmp_path / "train.npz", split)
    back = read_split(tmp_path / "train.npz")
    assert np.array_equal(back.images, split.images) and np.array_equal(back.labels, split.labels)
    assert back.classes == split.classes and back.source == split.source
    assert (tmp_path / "train.npz.sha256").read_text() == f"{digest}  train.npz\n"


def test_missing_file_says_how_to_prepare(tmp_path):
    with pytest.raises(DataError, match=r"does not exist; prepare it again: in the workflow, rerun snakemake .*python -m repro.data.cifar10"):
        read_split(tmp_path / "train.npz")


def test_truncated_file_fails_checksum(tmp_path):
    path = tmp_path / "train.npz"
    write_split(path, synthetic_split(30))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"checksum mismatch .* truncated or was changed; delete it"):
        read_split(path)
    with pytest.raises(DataError, match="not a readable split file"):
        read_split(path, verify=False)


def test_file_without_sidecar_is_not_trusted(tmp_path):
    path = tmp_path / "train.npz"
    write_split(path, synthetic_split(10))
    (tmp_path / "train.npz.sha256").unlink()
    with pytest.raises(DataError, match="preparation was interrupted"):
        read_split(path)


def test_killed_write_leaves_nothing(tmp_path):
    def dies(fh):
        fh.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "x.npz", dies)
    assert list(tmp_path.iterdir()) == []


def test_rewrite_invalidates_old_sidecar_first(tmp_path, monkeypatch):
    path = tmp_path / "train.npz"
    write_split(path, synthetic_split(10))
    import repro.data.arrays as arrays

    monkeypatch.setattr(arrays, "atomic_write", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_split(path, synthetic_split(12, seed=1))
    assert not (tmp_path / "train.npz.sha256").exists()  # the old file is no longer vouched for


def test_split_validation_and_balanced_subset():
    with pytest.raises(DataError, match="uint8"):
        Split(np.zeros((2, 32, 32, 3), np.float32), np.zeros(2, np.int64), ("a",), "x")
    split = synthetic_split(100)  # labels 0..9 repeating
    sorted_split = split.subset(np.argsort(split.labels, kind="stable"))  # class blocks, like the shards
    sub = sorted_split.balanced_subset(25)
    assert len(sub) == 25 and np.bincount(sub.labels, minlength=10).tolist() == [3] * 5 + [2] * 5
    assert sorted_split.balanced_subset(0) is sorted_split
