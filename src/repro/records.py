"""Run records: one JSON file per experiment run, the only thing later stages read.

A record is written atomically (temp file + rename), so a killed job never leaves a file that
later looks valid. Tables sit next to it as CSV. MLflow ingestion, figures and the claims report
all read records; nothing else talks to MLflow.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from repro.atomic import atomic_write

RECORD_NAME = "record.json"
RECORD_VERSION = 1
STATUSES = ("ok", "skipped")


class RecordError(ValueError):
    """A record is missing, unreadable or malformed."""


class MissingRecord(RecordError):
    """No record where one was looked for (the experiment has not run there)."""


def gpu_neighbours(record: dict) -> int | None:
    """How many other processes shared the record's GPU at most while it ran (provenance.gpu_sharing),
    or None where that was not measured or could not be told (a CPU run; "unknown ...")."""
    sharing = (record.get("provenance") or {}).get("gpu_sharing")
    return sharing.get("gpu_neighbours_max") if isinstance(sharing, dict) else None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def record_id(record: dict) -> str:
    """Stable id of one run: the same record re-ingested maps to the same MLflow run."""
    key = json.dumps(
        [record["experiment"], record["paper"], record["scale"], record["started"],
         record["provenance"].get("config_hash"), record["provenance"].get("hostname")],
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def write(out_dir: Path, record: dict) -> Path:
    record = {"record_version": RECORD_VERSION, **record}
    record["record_id"] = record_id(record)
    validate(record, where=str(out_dir))
    path = Path(out_dir) / RECORD_NAME
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True, default=_jsonable) + "\n")
    return path


def _jsonable(obj: Any):
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def validate(record: dict, where: str = "record") -> None:
    required = ("experiment", "paper", "scale", "status", "params", "metrics", "provenance", "started")
    missing = [k for k in required if k not in record]
    if missing:
        raise RecordError(f"{where}: record lacks {', '.join(missing)}")
    if record["status"] not in STATUSES:
        raise RecordError(f"{where}: status must be one of {STATUSES}, got {record['status']!r}")
    for k, v in record["metrics"].items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise RecordError(f"{where}: metric {k!r} must be a number, got {v!r}")


def read(path: Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_NAME
    if not path.exists():
        raise MissingRecord(f"{path}: no run record here (has the experiment run?)")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: corrupt run record ({exc}); delete it and rerun the step") from exc
    validate(record, where=str(path))
    record["_dir"] = str(path.parent)
    return record


def read_input(inputs: dict, name: str, producer: str) -> tuple[Path, dict]:
    """An experiment's input record ``inputs[name]`` (made by the experiment ``producer``): its folder
    and the record; a missing input or a record whose status is not ok is refused, naming the input."""
    if name not in inputs:
        raise ValueError(f"inputs.{name}: the record of {producer} is required")
    path = Path(inputs[name])
    rec = read(path.parent)
    if rec["status"] != "ok":
        raise ValueError(f"inputs.{name}: {path} has status {rec['status']} ({rec.get('reason')})")
    return path.parent, rec


def find(root: Path) -> list[Path]:
    """All record files under root (results/<paper>/<experiment>/record.json)."""
    root = Path(root)
    return sorted(p for p in root.glob(f"*/*/{RECORD_NAME}"))


# ---- committed reference runs (results/reference/<gpu>/<paper>/<experiment>/) and a step's inputs --
DEFAULT_ORDER = ("nvidia-h200",)  # the reference machine whose run a report shows first


def reference_slugs(reference_root: Path) -> list[str]:
    """The machines with committed reference runs (results/reference/<slug>/), DEFAULT_ORDER's first."""
    root = Path(reference_root)
    if not root.is_dir():
        return []
    slugs = [s for s in DEFAULT_ORDER if (root / s).is_dir()]
    return slugs + sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in slugs)


def find_reference(reference_root: Path, paper: str, experiment: str, gpu: str | None = None) -> Path | None:
    """The reference run folder of paper/experiment: on card ``gpu`` (a slug, e.g. nvidia-h100; a CPU
    step's run, published under cpu/, serves every card), or without one the first machine of
    reference_slugs that has it."""
    root = Path(reference_root)
    slugs = reference_slugs(root) if gpu is None else [gpu, "cpu"]
    for slug in slugs:
        candidate = root / slug / paper / experiment
        if (candidate / RECORD_NAME).exists():
            return candidate
    return None


def input_records(rec: dict, results: Path) -> list[dict] | None:
    """The records a CPU step read (its inputs that are records), or None when one is not there
    (input paths are relative to the run's working directory: results/<paper>/<experiment>/..., read
    here below ``results``, so that a published folder resolves its inputs among its neighbours)."""
    named = named_input_records(rec, results)
    return None if named is None else list(named.values())


def named_input_records(rec: dict, results: Path) -> dict[str, dict] | None:
    """:func:`input_records` under their input names (``inputs.<name>``)."""
    found = {}
    for name, value in (rec.get("inputs") or {}).items():
        path = Path(str(value))
        if path.name != RECORD_NAME:
            continue
        if not path.is_absolute():
            path = Path(results).joinpath(*path.parts[1:]) if path.parts[0] == "results" else Path(results).parent / path
        if not path.exists():
            return None
        found[name] = read(path)
    return found


def input_gpu_name(rec: dict, results: Path) -> str | None:
    """The GPU (name) whose records a CPU step combined: the one GPU of all its record inputs, or None."""
    names = {r["provenance"].get("gpu_name") for r in input_records(rec, results) or []}
    return names.pop() if len(names) == 1 else None
