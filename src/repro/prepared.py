"""Prepared CIFAR-10 splits as the workflow sees them, with no heavy imports (Snakemake calls
:func:`broken_splits` while it builds the DAG): does a prepared folder still match its manifest, and
which temp files did a killed preparation leave there."""

from __future__ import annotations

import json
from pathlib import Path

from repro.atomic import sha256_file

MANIFEST = "manifest.json"


def stale_temp_files(out_dir: Path) -> list[Path]:
    """Temp files a killed preparation left in ``out_dir`` (atomic_write's ``.<name>.*.tmp``)."""
    names = ("train.npz", "test.npz", "train.npz.sha256", "test.npz.sha256", MANIFEST)
    return sorted(p for n in names for p in Path(out_dir).glob(f".{n}.*.tmp"))


def broken_splits(out_dir: Path) -> list[str]:
    """Why the prepared splits in ``out_dir`` do not match their manifest (cheap: file sizes where the
    manifest records them, else the SHA-256), [] when they do or when nothing is prepared yet. The
    workflow calls this while it builds the DAG, changing nothing, and reruns the data step of a
    broken set (workflow/rules/data.smk)."""
    out_dir = Path(out_dir)
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text())
        splits = manifest["splits"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{out_dir / MANIFEST} is unreadable ({exc})"]
    problems = []
    for name, entry in splits.items():
        path = out_dir / entry["file"]
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif "bytes" in entry and path.stat().st_size != entry["bytes"]:
            problems.append(f"{path} has {path.stat().st_size} bytes, the manifest says {entry['bytes']} (truncated?)")
        elif "bytes" not in entry and sha256_file(path) != entry["sha256"]:
            problems.append(f"{path} does not match the SHA-256 in the manifest")
    return problems


def prepared_from(out_dir: Path, source: str, train_shards: int | None) -> bool:
    """Whether the splits in ``out_dir`` were prepared from ``source`` (a ``--source`` spec) with
    ``train_shards`` training shards, as their manifest says (False when nothing is prepared or the
    manifest is unreadable). The workflow asks while it builds the DAG: a check of the source the
    splits came from need not rerun the data step (workflow/rules/data.smk)."""
    try:
        manifest = json.loads((Path(out_dir) / MANIFEST).read_text())
        made_from, shards = manifest["source"], manifest.get("train_shards")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return made_from == source and shards in (train_shards, None)  # a dir: source has no shard count
