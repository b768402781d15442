"""Prepared split files: what every training job reads.

One uncompressed ``<split>.npz`` per split holding ``images`` (N, H, W, 3) uint8 (NHWC),
``labels`` (N,) int64, ``classes`` (class names, index = label) and ``source`` (where the
pixels came from), plus a sidecar ``<split>.npz.sha256`` in ``sha256sum`` format. The sidecar is
written last and removed first, so a split file without a matching sidecar is never trusted:
it is what an interrupted preparation leaves behind.
"""

from __future__ import annotations

from dataclasses import dataclass
import zipfile
from pathlib import Path

import numpy as np

from repro.atomic import atomic_write, sha256_file

PREPARE_HINT = (
    "prepare it again: in the workflow, rerun snakemake (it re-prepares results/data/cifar10 when a "
    "split there does not match its manifest); by hand, python -m repro.data.cifar10 "
    "--source shards:<folder with the JPEG shards and SHA256SUMS> --out <dir> (see --help for other sources)"
)


class DataError(RuntimeError):
    """Data is missing, corrupt or incomplete; the message says what to do about it."""


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # (N, H, W, 3) uint8
    labels: np.ndarray  # (N,) int64
    classes: tuple[str, ...]
    source: str

    def __post_init__(self):
        if self.images.dtype != np.uint8 or self.images.ndim != 4 or self.images.shape[-1] != 3:
            raise DataError(f"images must be uint8 (N, H, W, 3), got {self.images.dtype} {self.images.shape}")
        if self.labels.shape != (len(self.images),):
            raise DataError(f"labels shape {self.labels.shape} does not match {len(self.images)} images")
        if len(self.labels) and not (0 <= self.labels.min() and self.labels.max() < len(self.classes)):
            raise DataError(f"labels outside 0..{len(self.classes) - 1}")

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: np.ndarray) -> "Split":
        return Split(self.images[index], self.labels[index], self.classes, self.source)

    def balanced_subset(self, n: int) -> "Split":
        """The first ``n`` images taking classes in turn (so a small subset stays class-balanced),
        kept in file order; ``n`` <= 0 or >= len means all."""
        if n <= 0 or n >= len(self):
            return self
        order = np.argsort(self.labels, kind="stable")
        sorted_labels = self.labels[order]
        rank = np.empty(len(self), dtype=np.int64)  # position of each image within its class
        rank[order] = np.arange(len(self)) - np.searchsorted(sorted_labels, sorted_labels, side="left")
        return self.subset(np.sort(np.lexsort((self.labels, rank))[:n]))


def checksum_path(path: Path) -> Path:
    return Path(f"{path}.sha256")


def write_split(path: Path, split: Split) -> str:
    """Write ``split`` to ``path`` (+ sidecar) crash-safely; returns the file's SHA-256."""
    path = Path(path)
    checksum_path(path).unlink(missing_ok=True)  # an old sidecar must never vouch for a new file
    atomic_write(path, lambda fh: np.savez(
        fh, images=split.images, labels=split.labels.astype(np.int64),
        classes=np.array(split.classes), source=np.array(split.source)))
    digest = sha256_file(path)
    atomic_write(checksum_path(path), lambda fh: fh.write(f"{digest}  {path.name}\n".encode()))
    return digest


def read_split(path: Path, verify: bool = True) -> Split:
    """Load a prepared split; with ``verify``, check it against its sidecar checksum first."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"prepared split {path} does not exist; {PREPARE_HINT}")
    if verify:
        sidecar = checksum_path(path)
        if not sidecar.is_file():
            raise DataError(
                f"{path} has no checksum file {sidecar.name}: its preparation was interrupted or it was "
                f"not made by repro.data.cifar10. Delete it and {PREPARE_HINT}")
        fields = sidecar.read_text().split()
        expected = fields[0] if fields else "(empty)"
        actual = sha256_file(path)
        if actual != expected:
            raise DataError(
                f"checksum mismatch for {path}: {sidecar.name} says {expected}, the file hashes to "
                f"{actual}. The file is truncated or was changed; delete it and {PREPARE_HINT}")
    try:
        with np.load(path, allow_pickle=False) as z:
            return Split(z["images"], z["labels"].astype(np.int64), tuple(str(c) for c in z["classes"]),
                         str(z["source"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a readable split file ({exc}); delete it and {PREPARE_HINT}") from exc
