"""What the workflow computes from the repository's own files at each Snakemake start, kept between
starts.

Every start of Snakemake (a no-op rerun, ``-n``, each SLURM job) evaluates the Snakefile and the
rules' input functions: for each experiment its config files, the import closure of its entry's
sources, its declared inputs, kernels and sweep points (workflow/rules/common.smk). Those are pure
functions of the files under ``config/``, ``src/repro/`` and ``workflow/`` and of the Snakefile (the
rules' output patterns are in the rule files), and of the scale, so they are kept in
``.cache/dag.json`` (``$REPRO_DAG_CACHE``), keyed by a stamp of those files: each file's path, size
and modification time, as Snakemake itself judges outputs by modification times. Any change to
any of the files (an edit, a checkout, a new experiment) changes the stamp, and the next start
computes everything again (about 0.5 s on 2 cores); an unreadable or foreign cache is an empty one.
Deleting the file only costs that one computation.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Callable

from repro.layout import REPO_ROOT, config_dir

VERSION = 1
# the files the cached values are computed from: (folder, glob)
TREES = (("config", "**/*"), ("src/repro", "**/*.py"), ("workflow", "**/*"), (".", "Snakefile"))


def cache_path() -> Path:
    return Path(os.environ.get("REPRO_DAG_CACHE") or REPO_ROOT / ".cache" / "dag.json")


def tree_stamp(roots: tuple[Path, ...] | None = None) -> str:
    """A digest of (path, size, mtime_ns) of every file of TREES (``roots``: their folders, default
    this repository's config directory, src/repro, workflow and its root), and of the roots themselves."""
    roots = roots or (config_dir(), REPO_ROOT / "src" / "repro", REPO_ROOT / "workflow", REPO_ROOT)
    h = hashlib.sha256(f"v{VERSION}".encode())
    for root, (_, pattern) in zip(roots, TREES):
        h.update(f"\0{root}".encode())
        for path in sorted(Path(root).glob(pattern)):
            if "__pycache__" in path.parts:
                continue
            try:
                st = path.stat()
            except OSError:  # removed while listed
                continue
            if stat.S_ISREG(st.st_mode):
                h.update(f"\0{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


class DagCache:
    """{key: JSON value} valid for one stamp of the source trees. ``get(key, compute)`` returns the
    stored value or ``compute()``'s (then stored); ``save()`` writes the new values (atomically: a
    killed start leaves the old file or the new one), and runs at exit where ``save_at_exit``."""

    def __init__(self, path: Path | None = None, stamp: str | None = None, save_at_exit: bool = True):
        self.path = Path(path or cache_path())
        self.stamp = stamp or tree_stamp()
        self.entries: dict = {}
        self.dirty = False
        try:
            data = json.loads(self.path.read_text())
            if isinstance(data, dict) and data.get("stamp") == self.stamp and isinstance(data.get("entries"), dict):
                self.entries = data["entries"]
        except (OSError, ValueError):
            pass
        if save_at_exit:
            atexit.register(self.save)

    def get(self, key: str, compute: Callable[[], object]):
        if key not in self.entries:
            value = compute()
            # stored as JSON gives it back (tuples as lists): the first start sees what later ones see
            self.entries[key] = json.loads(json.dumps(value))
            self.dirty = True
        return self.entries[key]

    def save(self) -> None:
        if not self.dirty:
            return
        from repro.atomic import atomic_write

        blob = json.dumps({"stamp": self.stamp, "entries": self.entries}, sort_keys=True).encode()
        try:
            atomic_write(self.path, lambda fh: fh.write(blob))
            self.dirty = False
        except OSError:  # a read-only tree: the values are still right, just not kept
            pass
