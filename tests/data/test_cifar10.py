"""CIFAR-10 preparation: real shards (if present), and every failure a user can hit, with
hand-made miniature inputs."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repro.data import cifar10
from repro.data.arrays import DataError, read_split
from repro.data.cifar10 import CLASSES, main, parse_source, prepare_cifar10

SHARDS = Path(os.environ.get("REPRO_CIFAR10_SHARDS", Path(__file__).resolve().parents[3] / "shared/data/cifar10-jpeg"))


def test_mini_shards_subset_and_manifest(mini_shards, tmp_path):
    out = tmp_path / "prepared"
    manifest = prepare_cifar10(f"shards:{mini_shards}", out, train_shards=2)
    train, test = read_split(out / "train.npz"), read_split(out / "test.npz")
    assert len(train) == 40 and len(test) == 20
    assert train.images.shape == (40, 32, 32, 3) and train.images.dtype == np.uint8
    assert train.labels.dtype == np.int64 and np.bincount(train.labels).tolist() == [4] * 10
    assert train.classes == CLASSES
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["train_shards"] == 2 and manifest["shards"]["train"] == ["train-0.tar.xz", "train-1.tar.xz"]
    assert manifest["splits"]["train"]["n_images"] == 40
    assert set(manifest["inputs_sha256"]) == {"train-0.tar.xz", "train-1.tar.xz", "test.tar.xz"}


def test_bad_shard_checksum_names_file(mini_shards, tmp_path):
    with open(mini_shards / "train-0.tar.xz", "ab") as fh:
        fh.write(b"x")
    with pytest.raises(DataError, match=r"checksum mismatch for .*train-0\.tar\.xz.*copy it again"):
        prepare_cifar10(f"shards:{mini_shards}", tmp_path / "out", train_shards=1)
    assert not (tmp_path / "out" / "train.npz").exists()


def test_missing_shard_and_missing_sums(mini_shards, tmp_path):
    (mini_shards / "test.tar.xz").unlink()
    with pytest.raises(DataError, match=r"test\.tar\.xz is missing"):
        prepare_cifar10(f"shards:{mini_shards}", tmp_path / "out", train_shards=1)
    (mini_shards / "SHA256SUMS").unlink()
    with pytest.raises(DataError, match="SHA256SUMS is missing"):
        prepare_cifar10(f"shards:{mini_shards}", tmp_path / "out")
    with pytest.raises(DataError, match="SHA256SUMS is missing"):
        prepare_cifar10(f"shards:{tmp_path / 'nowhere'}", tmp_path / "out")


def test_bad_source_spec_and_shard_count(tmp_path, mini_shards):
    with pytest.raises(DataError, match="shards:DIR"):
        parse_source("/some/dir")
    with pytest.raises(DataError, match="train_shards must be 1..5"):
        prepare_cifar10(f"shards:{mini_shards}", tmp_path / "out", train_shards=6)


def test_official_dir_checks_md5(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    batch = {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1, 2]}
    for name in ("data_batch_1", "test_batch"):
        (d / name).write_bytes(pickle.dumps(batch))
    with pytest.raises(DataError, match=r"data_batch_1 has MD5 .* not the official release"):
        prepare_cifar10(f"official:{tmp_path}", tmp_path / "out", train_shards=1)
    fake_tgz = tmp_path / "cifar-10-python.tar.gz"
    fake_tgz.write_bytes(b"not a tarball")
    with pytest.raises(DataError, match="not the complete official"):
        prepare_cifar10(f"official:{fake_tgz}", tmp_path / "out")


def test_official_unpickle_layout():
    # Official rows are channel-major (1024 R, 1024 G, 1024 B); we store NHWC.
    row = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.full(1024, 30)]).astype(np.uint8)
    images, labels = cifar10._unpickle(pickle.dumps({b"data": row[None], b"labels": [7]}), "x")
    assert images.shape == (1, 32, 32, 3) and images[0, 5, 6].tolist() == [10, 20, 30]
    assert labels.tolist() == [7]


def test_image_folder_source(tmp_path):
    for split in ("train", "test"):
        for c in ("cat", "dog"):
            (tmp_path / "imgs" / split / c).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (32, 32), (i, 0, 0)).save(tmp_path / "imgs" / split / c / f"{i}.png")
    manifest = prepare_cifar10(f"dir:{tmp_path / 'imgs'}", tmp_path / "out")
    train = read_split(tmp_path / "out" / "train.npz")
    assert train.classes == ("cat", "dog") and train.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert manifest["splits"]["test"]["n_images"] == 6
    with pytest.raises(DataError, match="train_shards applies to shards: and official:"):
        prepare_cifar10(f"dir:{tmp_path / 'imgs'}", tmp_path / "out", train_shards=1)
    shutil.rmtree(tmp_path / "imgs" / "test")
    with pytest.raises(DataError, match=r"imgs/test is missing"):
        prepare_cifar10(f"dir:{tmp_path / 'imgs'}", tmp_path / "out")


def test_cli_exit_codes(tmp_path, mini_shards, capsys):
    assert main(["--source", f"shards:{mini_shards}", "--out", str(tmp_path / "o"), "--train-shards", "1"]) == 0
    assert "prepared 20 train and 20 test images" in capsys.readouterr().out
    assert main(["--source", f"shards:{tmp_path}", "--out", str(tmp_path / "o2")]) == 2
    assert "SHA256SUMS is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "official:download" in capsys.readouterr().out


@pytest.mark.skipif(not (SHARDS / "SHA256SUMS").is_file(),
                    reason=f"CIFAR-10 JPEG shards not found at {SHARDS} (set REPRO_CIFAR10_SHARDS)")
def test_real_shards_one_train_shard(tmp_path):
    manifest = prepare_cifar10(f"shards:{SHARDS}", tmp_path, train_shards=1)
    train, test = read_split(tmp_path / "train.npz"), read_split(tmp_path / "test.npz")
    assert (len(train), len(test)) == (10_000, 10_000)
    assert np.bincount(train.labels).tolist() == [1000] * 10 and np.bincount(test.labels).tolist() == [1000] * 10
    assert manifest["splits"]["train"]["sha256"] == (tmp_path / "train.npz.sha256").read_text().split()[0]
    assert 100 < train.images.mean() < 140  # real photographs, not blank decodes


# --- recovery (issue 19, item 7) -----------------------------------------------------------------

def test_truncated_split_is_seen_as_broken_and_the_hint_names_no_machine_path(mini_shards, tmp_path):
    from repro.prepared import broken_splits

    out = tmp_path / "prep"
    prepare_cifar10(f"shards:{mini_shards}", out, train_shards=2)
    assert broken_splits(out) == [] and broken_splits(tmp_path / "none") == []
    data = (out / "train.npz").read_bytes()
    (out / "train.npz").write_bytes(data[: len(data) // 2])
    problems = broken_splits(out)
    assert len(problems) == 1 and "train.npz has" in problems[0] and "truncated" in problems[0]
    with pytest.raises(DataError) as exc:
        read_split(out / "train.npz")
    assert "/work/" not in str(exc.value) and "rerun snakemake" in str(exc.value)


def test_check_only_writes_nothing_and_refuses_a_corrupt_source(mini_shards, tmp_path, capsys):
    out = tmp_path / "prep"
    prepare_cifar10(f"shards:{mini_shards}", out, train_shards=2)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = tmp_path / "bad"
    shutil.copytree(mini_shards, bad)
    with open(bad / "test.tar.xz", "r+b") as fh:
        fh.seek(10)
        fh.write(b"\xff")
    assert main(["--source", f"shards:{mini_shards}", "--check", "--train-shards", "2"]) == 0
    capsys.readouterr()
    assert main(["--source", f"shards:{bad}", "--check", "--train-shards", "2"]) == 2
    err = capsys.readouterr().err
    assert "checksum mismatch" in err and "test.tar.xz" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_killed_preparation_leaves_no_temp_file_after_the_next(mini_shards, tmp_path):
    from repro.prepared import stale_temp_files

    out = tmp_path / "prep"
    out.mkdir()
    stale = out / ".train.npz.abc123.tmp"  # what atomic_write leaves when killed with SIGKILL
    stale.write_bytes(b"half")
    (out / "mine.tmp").write_bytes(b"not ours")
    assert stale_temp_files(out) == [stale]
    prepare_cifar10(f"shards:{mini_shards}", out, train_shards=2)
    assert not stale.exists() and (out / "mine.tmp").exists()


def test_prepared_from_reads_the_source_and_shards_of_the_manifest(mini_shards, tmp_path):
    """The workflow asks this while it builds the DAG (data.smk): a rerun check of the source the
    splits came from reruns no data step; another source, or another shard count, does."""
    from repro.prepared import prepared_from

    out = tmp_path / "prep"
    source = f"shards:{mini_shards}"
    assert not prepared_from(out, source, 2)  # nothing prepared yet
    prepare_cifar10(source, out, train_shards=2)
    assert prepared_from(out, source, 2)
    assert not prepared_from(out, source, 5) and not prepared_from(out, f"shards:{tmp_path / 'other'}", 2)
    (out / "manifest.json").write_text("{")
    assert not prepared_from(out, source, 2)
