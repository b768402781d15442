"""The tuners' memory: each GPU's chosen configuration per problem key, in one JSON file, so that a
rerun with the same file tunes nothing (TSM2X's variants, the sparse GEMM's Triton configurations).
A file written by another cache version is ignored (its choices may have been verified differently).
"""

from __future__ import annotations

import json
from pathlib import Path

from repro.records import atomic_write_text


class ChoiceCache:
    """``{gpu name: {key: choice fields}}`` kept in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None, gpu_name: str, version: int):
        self.path = Path(path) if path is not None else None
        self.gpu_name, self.version = gpu_name, version
        self._entries: dict[str, dict[str, dict]] = {}
        if self.path is not None and self.path.exists():
            data = json.loads(self.path.read_text())
            if data.get("version") == version:
                self._entries = data.get("gpus", {})

    def get(self, key: str) -> dict | None:
        """This GPU's choice for ``key`` (its fields), or None."""
        return self._entries.get(self.gpu_name, {}).get(key)

    def put(self, key: str, fields: dict) -> None:
        """Remember this GPU's choice for ``key`` and write the file."""
        self._entries.setdefault(self.gpu_name, {})[key] = fields
        if self.path is not None:
            atomic_write_text(self.path, json.dumps({"version": self.version, "gpus": self._entries},
                                                    indent=1, sort_keys=True) + "\n")
