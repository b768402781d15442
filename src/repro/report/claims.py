"""The claims ledger and its verdicts: every paper claim beside our measured value, judged on two machines.

`python -m repro.report --ledger config/claims --results results --reference results/reference --out results/claims`
(repro.report.__main__) writes claims.csv, report.md and report.html (repro.report.pages) and
claims_chart.png (repro.report.chart) from this module's table.

Each claim is judged twice, side by side:
  reference  the committed paper-scale run (results/reference/<gpu>/, the H200's first):
             reproduced / not-reproduced against the target, or no-reference (none committed);
  here       this machine's run (results/): reproduced / not-reproduced at paper scale; smoke (it ran
             at the smoke scale: its value is shown, not judged against a paper-scale target); or
             not-run-here, with why (e.g. skipped: needs a CUDA GPU).
A claim with no experiment yet is pending on both sides. A claim that cannot run on any machine lent to
the project (no toolchain installs) states why, when and with what evidence (`unavailable: {checked,
why, evidence}`) and is `unavailable` on both sides: shown as such, never as pending. A `kind: model` row is a simulator's
result: judged against its target like the others, and always shown as a model. A model's claim
names its tornado experiment (`assumed: {experiment: <paper>/tornado}`: the headline at each
assumed parameter's low and high end); the row shows the range the assumed parameters move the
headline over, and a range that straddles the target is `inconclusive`, not a verdict.

Every verdict carries its ceiling: the ledger names, per claim, a record's metric that bounds what any
implementation of the idea can reach on the card (`ceiling: {experiment, key, note}`), or says why
none can be measured (`ceiling: {none: ...}`). A judged side shows the ceiling's value from the same
card's run (never another card's), and a claim that misses says which kind of miss it is:
implementation (short of a ceiling that meets the target: the fraction of it), ceiling-below-target
(the claim cannot hold on this card: the ceiling's value) or no-ceiling (why).

claims.csv keeps the columns of earlier reports first: `verdict` is here's verdict when this machine
ran the claim at paper scale, else not-run-here (`measured` is then the reference value, `source`
says `reference`); `model` for a model row that has a value; pending; unavailable.
"""

from __future__ import annotations

import json
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from repro import layout, records, sweep
from repro.pipeline.reference import stale_code
from repro.records import find_reference, input_gpu_name, named_input_records

COLUMNS = ["claim_id", "paper", "statement", "paper_value", "target", "measured", "unit", "verdict",
           "source", "hardware", "needs", "run_id", "commit"]
# added after the columns above, in this order (claims.csv keeps its earlier columns first)
SIDE_COLUMNS = ["kind", "reference_verdict", "reference_measured", "reference_hardware", "reference_date",
                "reference_commit", "reference_record", "reference_run_id", "here_verdict", "here_measured",
                "here_scale", "here_why", "here_record", "here_run_id", "here_mlflow_run",
                "reference_ceiling", "reference_miss", "here_ceiling", "here_miss"]
CSV_COLUMNS = COLUMNS + SIDE_COLUMNS
VERDICTS = ("reproduced", "not-reproduced", "inconclusive", "not-run-here", "model", "pending", "unavailable")
REFERENCE_VERDICTS = ("reproduced", "not-reproduced", "inconclusive", "no-reference", "pending", "unavailable")
HERE_VERDICTS = ("reproduced", "not-reproduced", "inconclusive", "smoke", "not-run-here", "pending", "unavailable")
UNJUDGED = ("pending", "unavailable")  # verdicts of a claim with no metric: never a model's, never a value
JUDGED = ("reproduced", "not-reproduced", "inconclusive")  # verdicts that have a value against the target
# what a miss (not-reproduced) is, judged with the claim's ceiling (_apply_ceiling)
MISS_KINDS = ("implementation", "ceiling-below-target", "no-ceiling")
MISS_LABELS = {"implementation": "implementation short of its ceiling", "ceiling-below-target": "ceiling below the target",
               "no-ceiling": "no ceiling measured"}
CLAIM_FIELDS = {"id", "paper", "statement", "paper_value", "paper_unit", "unit", "target", "target_reason", "direction",
                "metric", "spread", "also", "needs", "kind", "timing", "ceiling", "note", "assumed",
                "unavailable"}
UNAVAILABLE_FIELDS = {"checked", "why", "evidence"}  # checked: YYYY-MM-DD; why: one line; evidence: commands and output
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# A value a claim reads from a run (its metric, an also-condition, its ceiling): a metric of the run's
# record ({experiment, key}) or a statistic over the rows of one of the run's tables, computed when
# the report is made ({experiment, table, column or ratio, stat, where, minus}; table_value).
STATS = {"mean": lambda v: float(v.mean()), "median": lambda v: float(v.median()), "min": lambda v: float(v.min()),
         "max": lambda v: float(v.max()),
         "geomean": lambda v: float(math.exp(v.map(math.log).mean())) if (v > 0).all() else math.nan}
TABLE_FIELDS = {"table", "column", "ratio", "stat", "where", "minus"}
SOURCE_FORM = ("{experiment: <paper>/<name>, key: <metric>} or {experiment: <paper>/<name>, table: <name>.csv, "
               "column: <column> (or ratio: [<column or number>, <column or number>]), stat: "
               f"{'|'.join(STATS)}, where: {{<column>: <value>, ...}} (optional), minus: <number> (optional)}}")
CEILING_FORM = ("{experiment: <paper>/<name>, key: <metric> (or a table statistic: table, column or ratio, stat, "
                "where, minus), note: <what bounds what, one line>} or {none: <why no ceiling can be measured>}")
REQUIRED = {"id", "paper", "statement", "paper_value", "unit", "target", "direction"}
NEEDS = re.compile(r"^(cpu|gpu\d*)$")
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
MLFLOW_SUMMARY = Path("mlflow") / "ingested.json"  # below the results folder (repro.pipeline.tracking --out)
ESTIMATE_PREFIX = "est_"  # a smoke record's estimate of a metric it cannot measure (here_side)


class LedgerError(ValueError):
    pass


def _ledger_files(path: Path) -> list[Path]:
    path = Path(path)
    files = layout.claims_files(path.parent) if path.name == "claims" and path.is_dir() else (
        sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    if not files:
        raise LedgerError(f"{path}: no claims files (config/claims/<paper>.yaml)")
    return files


def load_ledger(path: Path) -> list[dict]:
    """Every claim of the ledger: the claims files of a folder (config/claims/<paper>.yaml), or one
    file, validated as one ledger (ids unique across files)."""
    claims, seen = [], {}
    for file in _ledger_files(path):
        try:
            data = yaml.safe_load(file.read_text())
        except yaml.YAMLError as exc:
            raise LedgerError(f"{file}: not valid YAML: {exc}") from None
        entries = data.get("claims") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise LedgerError(f"{file}: expected a top-level 'claims:' list")
        for i, c in enumerate(entries):
            where = f"{file}: claim #{i + 1} ({c.get('id', '?')})"
            if unknown := set(c) - CLAIM_FIELDS:
                raise LedgerError(f"{where}: unknown field(s) {sorted(unknown)}")
            if missing := REQUIRED - set(c):
                raise LedgerError(f"{where}: missing field(s) {sorted(missing)}")
            if c["direction"] not in OPS:
                raise LedgerError(f"{where}: direction must be one of {list(OPS)}")
            timing = c.get("timing", False)
            if not (isinstance(timing, bool) or (isinstance(timing, list) and timing
                                                 and all(isinstance(t, str) for t in timing))):
                raise LedgerError(f"{where}: timing must be true, false or a list of the comparison's input names")
            if c["id"] in seen:
                raise LedgerError(f"{where}: duplicate id (also in {seen[c['id']]})")
            seen[c["id"]] = file
            if c.get("metric") is not None:
                _check_source(c["metric"], f"{where}: metric", set())
            for j, cond in enumerate(c.get("also") or []):
                _check_source(cond, f"{where}: also #{j + 1}", {"target", "direction"})
                if cond["direction"] not in OPS:
                    raise LedgerError(f"{where}: also #{j + 1}: direction must be one of {list(OPS)}")
            if "target_reason" in c:
                reason = c["target_reason"]
                if not (isinstance(reason, str) and reason.strip() and "\n" not in reason.strip()):
                    raise LedgerError(f"{where}: target_reason must be one line of text (why the target is not "
                                      f"the paper's value), got {reason!r}")
                if _is_number(c["paper_value"]) and c["target"] == c["paper_value"]:
                    raise LedgerError(f"{where}: target_reason given, but the target is the paper's value "
                                      f"({_fmt(c['paper_value'])})")
            if "needs" in c and not NEEDS.match(str(c["needs"])):
                raise LedgerError(f"{where}: needs must be cpu, gpu or gpu<N>, got {c['needs']!r}")
            if "spread" in c and not _spread_ok(c["spread"]):
                raise LedgerError(f"{where}: spread must be {{repeats: [<run folder>, ...]}} (the folders of repeat "
                                  f"runs of the headline metric, relative to the card's reference folder) or "
                                  f"{{rounds: <metric>}} (the headline run's own rounds: the largest max/min - 1 "
                                  f"of one arm's measurements over them), got {c['spread']!r}")
            if "ceiling" in c:
                _check_ceiling(c["ceiling"], where)
            if "assumed" in c and not (isinstance(c["assumed"], dict) and set(c["assumed"]) == {"experiment"}
                                       and isinstance(c["assumed"]["experiment"], str)
                                       and c["assumed"]["experiment"].count("/") == 1):
                raise LedgerError(f"{where}: assumed must be {{experiment: <paper>/<name>}} (the tornado experiment "
                                  f"whose record holds the headline's range over the assumed parameters), got "
                                  f"{c['assumed']!r}")
            if "unavailable" in c:
                _check_unavailable(c, where)
            if c.get("metric") and "needs" in c:
                raise LedgerError(f"{where}: needs follows from the experiments' gpus; state it only for a "
                                  "pending claim (no metric)")
            claims.append(c)
    return claims


def _check_unavailable(c: dict, where: str) -> None:
    u = c["unavailable"]
    if not (isinstance(u, dict) and set(u) == UNAVAILABLE_FIELDS and DATE.match(str(u["checked"]))
            and _text(u["why"]) and "\n" not in u["why"].strip() and _text(u["evidence"])):
        raise LedgerError(f"{where}: unavailable must be {{checked: <YYYY-MM-DD>, why: <one line>, evidence: <the "
                          f"commands run and their output>}}, got {u!r}")
    if c.get("metric") is not None:
        raise LedgerError(f"{where}: an unavailable claim has no metric (it cannot run here); drop one of them")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def unexplained_targets(ledger: list[dict]) -> list[str]:
    """The claims whose target is not the paper's value and whose ledger entry gives no target_reason
    (a claim with no paper value, paper_value null, has no value to sit at)."""
    return [c["id"] for c in ledger if _is_number(c["paper_value"]) and c["target"] != c["paper_value"]
            and not c.get("target_reason")]


def _text(v) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _source_problem(cond, extra: set[str]) -> str:
    """What is wrong with a value's source (SOURCE_FORM) beside the fields ``extra``; "" if nothing."""
    if not isinstance(cond, dict):
        return "not a mapping"
    if not (_text(cond.get("experiment")) and re.fullmatch(r"[^/\s]+/[^\s]+", cond["experiment"])):
        return "experiment must be <paper>/<name>"
    if missing := extra - set(cond):
        return f"missing {sorted(missing)}"
    if "key" in cond:
        if unknown := set(cond) - {"experiment", "key"} - extra:
            return f"unknown field(s) {sorted(unknown)} beside key (a table statistic has no key)"
        return "" if _text(cond["key"]) else "key must be a metric's name"
    if "table" not in cond:
        return "needs key (a record's metric) or table (a statistic of one of the run's tables)"
    if unknown := set(cond) - {"experiment"} - TABLE_FIELDS - extra:
        return f"unknown field(s) {sorted(unknown)}"
    if not (_text(cond["table"]) and cond["table"].endswith(".csv") and "/" not in cond["table"]):
        return f"table must be the file name of one of the run's tables (<name>.csv), got {cond['table']!r}"
    if ("column" in cond) == ("ratio" in cond):
        return "a table statistic needs exactly one of column and ratio"
    if "column" in cond and not _text(cond["column"]):
        return "column must be a column's name"
    if "ratio" in cond and not (isinstance(cond["ratio"], list) and len(cond["ratio"]) == 2
                                and all(_text(x) or _is_number(x) for x in cond["ratio"])
                                and any(_text(x) for x in cond["ratio"])):
        return "ratio must be [<numerator>, <denominator>], each a column or a number, at least one a column"
    if cond.get("stat") not in STATS:
        return f"stat must be one of {list(STATS)}, got {cond.get('stat')!r}"
    if "where" in cond and not (isinstance(cond["where"], dict) and cond["where"]
                                and all(_text(k) and isinstance(v, (str, int, float, bool))
                                        for k, v in cond["where"].items())):
        return "where must be {<column>: <value>, ...} (rows whose columns equal those values)"
    if "minus" in cond and not _is_number(cond["minus"]):
        return "minus must be a number"
    return ""


def _check_source(cond, where: str, extra: set[str]) -> None:
    if problem := _source_problem(cond, extra):
        raise LedgerError(f"{where} must be {SOURCE_FORM}" + (f" with {', '.join(sorted(extra))}" if extra else "")
                          + f": {problem}, got {cond!r}")


def _check_ceiling(ceiling, where: str) -> None:
    """A ledger's ceiling: a run's value (SOURCE_FORM) with the line that says what it bounds, or why there is none."""
    if isinstance(ceiling, dict) and set(ceiling) == {"none"} and _text(ceiling["none"]):
        return
    if isinstance(ceiling, dict) and "none" not in ceiling and _text(ceiling.get("note")) \
            and not _source_problem(ceiling, {"note"}):
        return
    problem = _source_problem(ceiling, {"note"}) if isinstance(ceiling, dict) and "none" not in ceiling else ""
    raise LedgerError(f"{where}: ceiling must be {CEILING_FORM}" + (f" ({problem})" if problem else "")
                      + f", got {ceiling!r}")


def label(cond: dict) -> str:
    """What a condition reads, in a few words: the metric's key, or the table statistic
    ("mean of points.csv:speedup (dtype=float32)")."""
    if "key" in cond:
        return cond["key"]
    what = (cond["column"] if "column" in cond else "/".join(_fmt(x) for x in cond["ratio"]))
    what = f"{what} - {_fmt(cond['minus'])}" if cond.get("minus") else what
    where = ", ".join(f"{k}={v}" for k, v in (cond.get("where") or {}).items())
    return f"{cond['stat']} of {cond['table']}:{what}" + (f" ({where})" if where else "")


_TABLES: dict[tuple[str, float], pd.DataFrame] = {}


def _table(path: Path) -> pd.DataFrame:
    key = (str(path), path.stat().st_mtime)
    if key not in _TABLES:
        _TABLES[key] = pd.read_csv(path)
    return _TABLES[key]


def table_value(run_dir: Path, cond: dict) -> tuple[float | None, str]:
    """A table statistic (SOURCE_FORM) over the rows of one of a run's tables: (value, "") or (None,
    why there is none: no such table, column or rows). NaN where a value it reads is NaN (a
    statistic over part of the rows would misstate) or a geomean meets a value <= 0."""
    path = Path(run_dir) / cond["table"]
    if not path.is_file():
        return None, f"has no table {cond['table']}"
    df = _table(path)
    needed = [*(cond.get("where") or {}), *([cond["column"]] if "column" in cond else
                                            [x for x in cond["ratio"] if isinstance(x, str)])]
    if missing := [c for c in dict.fromkeys(needed) if c not in df.columns]:
        return None, f"has no column {', '.join(map(repr, missing))} in {cond['table']}"
    for col, want in (cond.get("where") or {}).items():
        df = df[df[col] == want]
    if df.empty:
        return None, f"has no rows in {cond['table']} where " + ", ".join(f"{k}={v}" for k, v in cond["where"].items())
    part = lambda x: df[x].astype(float) if isinstance(x, str) else float(x)  # noqa: E731
    values = part(cond["column"]) if "column" in cond else part(cond["ratio"][0]) / part(cond["ratio"][1])
    values = pd.Series(values, index=df.index, dtype=float) - float(cond.get("minus", 0))
    if values.isna().any():
        return math.nan, ""
    return STATS[cond["stat"]](values), ""


def source_value(record: dict, cond: dict) -> tuple[float | None, str]:
    """The value a condition reads from a run's record: its metric ``key``, or a statistic of one of
    its tables (table_value); (None, why) where the run has none."""
    if "key" in cond:
        if cond["key"] not in record["metrics"]:
            return None, f"has no metric {cond['key']!r}"
        return record["metrics"][cond["key"]], ""
    return table_value(Path(record["_dir"]), cond)


def gpus_needed(experiment: str, root: Path | None = None, _seen: frozenset = frozenset()) -> int:
    """The GPUs a paper-scale run of ``experiment`` needs, counting what it reads: the most of its own
    ``gpus``, those of the experiments whose records it declares as inputs and those of a sweep's
    points (a CPU comparison of GPU records needs the GPU that made them)."""
    if experiment in _seen:
        return 0
    seen = _seen | {experiment}
    names = set(layout.experiment_names(root))
    reads = {str(Path(p).parent) for p in layout.inputs(experiment, root).values() if Path(p).name == records.RECORD_NAME}
    if sweep.is_sweep(experiment, root):
        reads |= {p.experiment for p in sweep.points(experiment, "paper", root)}
    return max([layout.gpus(experiment, root), *(gpus_needed(e, root, seen) for e in reads if e in names)])


def needs_of(claim: dict, root: Path | None = None) -> str:
    """cpu, gpu or gpu<N>: what the claim's paper-scale run needs (stated only by a pending claim)."""
    if "needs" in claim or not claim.get("metric"):
        return str(claim.get("needs", ""))
    n = max(gpus_needed(c["experiment"], root) for c in [claim["metric"], *(claim.get("also") or [])]
            if layout.experiment_path(c["experiment"], root).is_file())
    return "cpu" if n == 0 else "gpu" if n == 1 else f"gpu{n}"


def _value(record: dict, cond: dict, claim_id: str) -> float:
    value, why = source_value(record, cond)
    if value is None:
        raise LedgerError(f"claim {claim_id}: run record {record['_dir']} {why}" +
                          (f" (it has {sorted(record['metrics'])})" if "key" in cond else ""))
    return value


def _record(root: Path, experiment: str) -> dict | None:
    path = Path(root) / experiment / records.RECORD_NAME
    return records.read(path) if path.exists() else None


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def record_path(record: dict) -> str:
    return str(Path(record["_dir"]) / records.RECORD_NAME)


def hardware_of(record: dict) -> str:
    """The machine a record's numbers come from: its GPU; for a CPU step over one GPU's records (a
    comparison), that GPU, said so; else the CPU."""
    prov = record["provenance"]
    if gpu := prov.get("gpu_name"):
        return gpu
    combined = input_gpu_name(record, Path(record["_dir"]).parents[1])
    return f"{combined} (CPU step over its records)" if combined else f"CPU {prov.get('cpu_model') or prov.get('cpu', '')}".strip()


def commit_of(record: dict, short: bool = False) -> str:
    prov = record["provenance"]
    commit = prov.get("commit", "") or ""
    return (commit[:7] if short else commit) + ("+dirty" if prov.get("dirty") else "")


@dataclass
class Side:
    """One machine's judgement of a claim: its verdict, the headline value, the records it read (by
    experiment), each condition's value and whether it holds, and why it was not judged."""

    verdict: str
    value: float | None = None
    records: dict[str, dict] = field(default_factory=dict)
    conditions: list[tuple[dict, float | None, bool | None]] = field(default_factory=list)
    why: str = ""
    details: list[str] = field(default_factory=list)
    ceiling: float | None = None  # the ceiling's value on this side's card (_apply_ceiling)
    miss: str = ""  # a not-reproduced side's kind of miss (MISS_KINDS)
    miss_text: str = ""  # the miss in a few words: the fraction of the ceiling, the ceiling's value, or why none

    @property
    def first(self) -> dict | None:
        return next(iter(self.records.values()), None)


def _conditions(claim: dict) -> list[dict]:
    return [{**claim["metric"], "target": claim["target"], "direction": claim["direction"]},
            *(claim.get("also") or [])]


def _holds(cond: dict, value: float) -> bool:
    return not (isinstance(value, float) and math.isnan(value)) and OPS[cond["direction"]](value, cond["target"])


def _condition_text(cond: dict, value: float | None, holds: bool | None) -> str:
    shown = "no value" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"
    verdict = "" if holds is None else (": holds" if holds else ": misses")
    return f"{label(cond)} = {shown} ({cond['direction']} {_fmt(cond['target'])}{verdict})"


def _nan_notes(side: Side) -> list[str]:
    """What a record says a NaN value of a condition means (its tag of that metric's name)."""
    notes = []
    for cond, value, _ in side.conditions:
        if isinstance(value, float) and math.isnan(value):
            tag = (side.records[cond["experiment"]].get("tags") or {}).get(cond.get("key", ""))
            notes.append(f"{label(cond)} has no value (NaN)" + (f": {tag}" if tag else ""))
    return notes


def _judged(claim: dict, recs: dict[str, dict], timing) -> Side:
    conds = _conditions(claim)
    values = [(c, _value(recs[c["experiment"]], c, claim["id"])) for c in conds]
    checked = [(c, v, _holds(c, v)) for c, v in values]
    side = Side("reproduced" if all(h for _, _, h in checked) else "not-reproduced", value=values[0][1],
                records=recs, conditions=checked)
    if "key" not in conds[0]:
        side.details.append(f"headline {_condition_text(*checked[0])}")
    side.details += [f"also {_condition_text(*c)}" for c in checked[1:]]
    side.details += _nan_notes(side)
    if timing and (shared := shared_gpu(recs.values(), None if timing is True else timing)):
        side.details.append(shared)
    return side


def _spread_ok(spread) -> bool:
    if not isinstance(spread, dict) or len(spread) != 1:
        return False
    if "repeats" in spread:
        reps = spread["repeats"]
        return isinstance(reps, list) and bool(reps) and all(isinstance(r, str) for r in reps)
    return isinstance(spread.get("rounds"), str) and bool(spread["rounds"])


def rounds_range(value: float, rel: float) -> tuple[float, float]:
    """The range given a ratio of two arms' medians when the most variable arm's rounds spanned a factor
    1 + ``rel`` (max/min): the ratio moved by that factor either way. A reading of the run's noise, not
    the worst case of both arms moving apart at once, which would be (1 + rel)^2."""
    return value / (1 + rel), value * (1 + rel)


def spread_of(claim: dict, card_root: Path | None) -> tuple[list[float], list[str]]:
    """The headline metric's values in the repeat runs the ledger names for the claim (``spread:
    repeats:``, folders below ``card_root``, the card's reference folder), and what is missing."""
    values, missing = [], []
    for rel in (claim.get("spread") or {}).get("repeats", []):
        path = Path(card_root or "") / rel
        rec = records.read(path) if card_root is not None and (path / records.RECORD_NAME).exists() else None
        value = source_value(rec, claim["metric"])[0] if rec is not None else None
        if value is None:
            missing.append(rel)
        else:
            values.append(float(value))
    return values, missing


def _apply_spread(claim: dict, side: Side, card_root: Path | None) -> None:
    """Judge the margin against the run-to-run spread: the range of the headline value over the run
    and its repeats. A margin to the target inside that range is no verdict: ``inconclusive``, with
    the spread. A claim whose ledger names no repeats says so."""
    value = side.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return
    if not claim.get("spread"):
        side.details.append("run-to-run spread: none measured (the ledger names no repeat runs)")
        return
    if "rounds" in claim["spread"]:  # the headline run's own rounds
        rec = side.records.get(claim["metric"]["experiment"])
        rel = (rec or {}).get("metrics", {}).get(claim["spread"]["rounds"])
        if rel is None or (isinstance(rel, float) and math.isnan(rel)):
            side.details.append(f"run-to-run spread: none measured (its run records no {claim['spread']['rounds']!r}: "
                                "one round, or made before its experiment timed rounds)")
            return
        lo, hi = rounds_range(float(value), float(rel))
        _judge_spread(claim, side, float(value), hi - lo,
                      f"{_fmt(hi - lo)} (the run's rounds: each arm within {_fmt(100 * float(rel))}%, so "
                      f"{_fmt(lo)} to {_fmt(hi)})")
        return
    repeats, missing = spread_of(claim, card_root)
    if missing:
        side.details.append(f"run-to-run spread: repeat runs missing on this card ({', '.join(missing)})")
    if not repeats:
        return
    values = [float(value), *repeats]
    _judge_spread(claim, side, float(value), max(values) - min(values),
                  f"{_fmt(max(values) - min(values))} (range over {len(values)} runs, "
                  f"{_fmt(min(values))} to {_fmt(max(values))})")


def _judge_spread(claim: dict, side: Side, value: float, spread: float, what: str) -> None:
    """A margin to the target inside ``spread`` is no verdict: ``inconclusive``, with the spread."""
    margin = abs(value - float(claim["target"]))
    text = f"run-to-run spread: {what}; margin to the target {_fmt(margin)}"
    if margin <= spread:
        side.verdict = "inconclusive"
        side.details.insert(0, f"inconclusive: the margin to the target is inside the {text.split(': ', 1)[1]}")
    else:
        side.details.append(text)


def assumed_range(rec: dict) -> tuple[float, float, float, str]:
    """A tornado record's (baseline, lowest, highest headline over the assumed parameters' ranges,
    the parameter that moves it most): repro.sim.sensitivity.tornado_summary's metrics and tag."""
    m = rec["metrics"]
    return (float(m["assumed_base"]), float(m["assumed_min"]), float(m["assumed_max"]),
            (rec.get("tags") or {}).get("assumed_largest", ""))


def _apply_assumed(claim: dict, side: Side, find, judge: bool = True) -> None:
    """The headline's range over the assumed parameters, from the claim's tornado run on the same
    card (``find``, as for the ceiling). With ``judge``, a judged side whose range straddles the
    target (the target holds at one end and not at the other) becomes ``inconclusive``: the verdict
    rests on an assumption. A claim whose ledger names no tornado says nothing."""
    spec = claim.get("assumed")
    if not spec or _nan(side.value):
        return
    exp = spec["experiment"]
    rec, why = find(exp)
    if rec is None or not {"assumed_base", "assumed_min", "assumed_max"} <= set(rec.get("metrics") or {}):
        side.details.append(f"assumed parameters: their range is unknown ({why or f'{exp} has no tornado metrics'})")
        return
    base, low, high, largest = assumed_range(rec)
    n = int(rec["metrics"].get("assumed_parameters", 0))
    moves = f"assumed parameters move it {low:.3g}-{high:.3g}: {largest or 'none'} the most"
    card_fig = Path(rec["_dir"]).parents[1] / "figures" / f"{exp}.png"  # a reference run's own figure
    chart = str(card_fig) if card_fig.exists() else layout.figure_path(exp)
    tail = (f" ({n} parameters, one at a time over their stated ranges; tornado chart {chart}, "
            f"record {record_path(rec)}"
            + (f"; its baseline {base:.4g} is not this row's value" if abs(base - float(side.value)) >
               1e-6 * max(1.0, abs(base)) else "") + ")")
    cond = {"target": claim["target"], "direction": claim["direction"]}
    if judge and side.verdict in JUDGED and _holds(cond, low) != _holds(cond, high):
        side.verdict = "inconclusive"
        side.details.insert(0, f"inconclusive: the {moves}, across the target "
                               f"({claim['direction']} {_fmt(claim['target'])}){tail}")
    else:
        side.details.append(moves + tail)


def is_difference(unit: str, target) -> bool:
    """A claim compared by measured - target (not by their ratio): its unit is points or percent, or
    its target is <= 0 (where a ratio means nothing). A unit that starts with "x" is a ratio whatever
    its description says after ("x over dense ... (fp16, 75 %)"). The picture places these claims the
    same way."""
    if target is None or target <= 0:
        return True
    return not re.match(r"x\b", unit.strip()) and bool(re.search(r"\bpoints?\b|%", unit))


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def share_of_ceiling(claim: dict, value, ceiling) -> tuple[float | None, str]:
    """How far the measured value gets towards its ceiling, in the claim's direction: value / ceiling
    for a larger-is-better ratio claim, ceiling / value for a smaller-is-better one (1: at the
    ceiling); for a difference claim (points, percent) no fraction, the gap in the claim's unit."""
    if _nan(value) or _nan(ceiling):
        return None, "no value"
    up = claim["direction"] in (">=", ">")
    if is_difference(claim["unit"], claim["target"]) or value <= 0 or ceiling <= 0:
        gap = (ceiling - value) if up else (value - ceiling)
        return None, (f"{_fmt(gap)} {claim['unit']} short of its ceiling" if gap > 0 else
                      f"{_fmt(-gap)} {claim['unit']} past its ceiling" if gap < 0 else "at its ceiling")
    share = value / ceiling if up else ceiling / value
    return share, f"{share:.3g} of its ceiling"


def _machine(rec: dict) -> str | None:
    """The GPU whose numbers a record holds: its own, or the one GPU of the records a CPU step read."""
    return rec["provenance"].get("gpu_name") or input_gpu_name(rec, Path(rec["_dir"]).parents[1])


def _other_card(ceiling_rec: dict, recs) -> str:
    """Why a ceiling's record may not bound the claim's records: it holds another GPU's numbers ("" if not)."""
    mine = {m for r in recs if (m := _machine(r))}
    theirs = _machine(ceiling_rec)
    if theirs and mine and theirs not in mine:
        return (f"the ceiling's run ({record_path(ceiling_rec)}) measured {theirs}, not {', '.join(sorted(mine))}: "
                "a ceiling never comes from another card")
    return ""


def _apply_ceiling(claim: dict, side: Side, find) -> None:
    """The claim's ceiling on this side's card, and what kind of miss a not-reproduced side is.

    ``find(experiment)`` gives the ceiling experiment's run on the same card (record, "") or (None,
    why not). The ceiling is the ledger's metric of that run. A miss is ``ceiling-below-target`` when
    the ceiling itself misses the target (the claim cannot hold on this card), ``implementation`` when
    the ceiling meets the target and the headline value does not (with the fraction of the ceiling
    it reaches), ``no-ceiling`` when there is no ceiling value (the ledger names none, the card has
    no run of it or the run no value) or the headline value meets its target (the miss is in an
    also-condition, which the headline's ceiling does not bound). An inconclusive side keeps its
    verdict: the ceiling is shown, no miss is classified."""
    if side.verdict not in JUDGED:
        return
    spec, value, why, where = claim.get("ceiling"), None, "", ""
    if not spec:
        why = "the ledger names no ceiling"
    elif "none" in spec:
        why = spec["none"]
    else:
        exp, key = spec["experiment"], label(spec)
        rec, why = find(exp)
        if rec is not None and not why and (why := _other_card(rec, side.records.values())):
            rec = None
        if rec is not None:
            where = f"{key} of {exp}, {record_path(rec)}"
            v, lacks = source_value(rec, spec)
            if v is None:
                why = f"the run of {exp} ({commit_of(rec, short=True)}) {lacks}"
            elif _nan(v):
                tag = (rec.get("tags") or {}).get(spec.get("key", ""))
                why = f"{key} of {exp} has no value (NaN)" + (f": {tag}" if tag else "")
            else:
                value = float(v)
    side.ceiling = value
    cond = {"target": claim["target"], "direction": claim["direction"]}
    target = f"{claim['direction']} {_fmt(claim['target'])}"
    if value is not None:
        side.details.append(f"ceiling: {value:.4g} ({where}; {spec['note']})")
    if side.verdict != "not-reproduced":
        if value is None:
            side.details.append(f"ceiling: none measured ({why})")
        elif not _nan(side.value):
            side.details[-1] += f"; the measured value is {share_of_ceiling(claim, side.value, value)[1]}"
        return
    headline_holds = side.conditions[0][2] if side.conditions else False
    if headline_holds:
        missed = [label(c) for c, _, holds in side.conditions[1:] if holds is False]
        side.miss, side.miss_text = "no-ceiling", f"the miss is in {', '.join(missed)}"
        text = (f"the headline value meets its target; the miss is in also-condition(s) {', '.join(missed)}, which "
                "the headline's ceiling does not bound" + ("" if value is not None else f" (ceiling: {why})"))
    elif value is None:
        side.miss = "no-ceiling"
        text = why
    elif not _holds(cond, value):
        side.miss, side.miss_text = "ceiling-below-target", f"ceiling {value:.4g}"
        text = (f"the ceiling {value:.4g} itself misses the target ({target}): the claim does not hold on this "
                "card, whatever the implementation")
    else:
        _, share = share_of_ceiling(claim, side.value, value)
        side.miss, side.miss_text = "implementation", share
        text = f"the ceiling {value:.4g} meets the target ({target}); the measured value is {share}"
    side.details.append(f"miss: {MISS_LABELS[side.miss]}: {text}")


def _reference_ceiling(reference_root: Path, gpu: str | None):
    """The ceiling's run on card ``gpu`` (or a CPU step under cpu/): never another card's."""
    def find(exp: str):
        ref_dir = find_reference(reference_root, *layout.split(exp), gpu=gpu)
        if ref_dir is None:
            return None, f"no committed run of {exp} on this card"
        return records.read(ref_dir), ""
    return find


def _here_ceiling(results: Path, scales: set[str]):
    """The ceiling's run on this machine, finished at the scale of the claim's runs."""
    def find(exp: str):
        rec = _record(results, exp)
        if rec is None or rec["status"] != "ok":
            return None, f"{exp} did not run here" + (f" ({rec.get('reason') or rec['status']})" if rec else "")
        if {rec["scale"]} != scales:
            return None, f"{exp} ran here at {rec['scale']} scale, the claim at {'/'.join(sorted(scales))}"
        return rec, ""
    return find


def card_sides(claim: dict, reference_root: Path, results: Path, config_root: Path | None = None,
               check_code: bool = True) -> dict:
    """The claim judged on each card's committed reference runs: {slug: Side}, the cards in
    records.reference_slugs' order (cpu/ is not a card: its CPU steps serve every card)."""
    cards = [s for s in records.reference_slugs(reference_root) if s != "cpu"]
    return {card: _reference_side_on(claim, reference_root, results, config_root, card, check_code) for card in cards}


def reference_side(claim: dict, reference_root: Path, results: Path, config_root: Path | None = None,
                   gpu: str | None = None, sides: dict | None = None, check_code: bool = True) -> Side:
    """The claim judged on the committed reference runs of one card (``gpu``, a slug; without one, the
    first card of records.reference_slugs that has a run of every experiment the claim reads): a
    ratio never mixes two cards' records. CPU steps published under cpu/ serve every card. See
    _reference_side_on for the rest; no-reference, naming what each card has, where no card has them
    all. check_code=False leaves out the check of which code changed since the runs (a table that
    shows only verdicts and values, e.g. the README's, needs no source digests)."""
    if gpu is not None:
        return _reference_side_on(claim, reference_root, results, config_root, gpu, check_code)
    sides = card_sides(claim, reference_root, results, config_root, check_code) if sides is None else sides
    cards = list(sides)
    if not sides:
        return _reference_side_on(claim, reference_root, results, config_root, None, check_code)
    for card, side in sides.items():  # the first card that judges it, else the first with its runs
        if side.verdict in JUDGED:
            return side
    for card, side in sides.items():
        if side.records:
            return side
    first = next(iter(sides.values()))
    partial = {card: [e for e in dict.fromkeys(c["experiment"] for c in _conditions(claim))
                      if find_reference(reference_root, *layout.split(e), gpu=card)] for card in cards}
    if sum(bool(found) for found in partial.values()) > 1:
        first.why += "; no one card has them all (" + "; ".join(
            f"{card}: {', '.join(found)}" for card, found in partial.items() if found) + ")"
    return first


def reference_cards(claim: dict, reference_root: Path, results: Path, config_root: Path | None = None,
                    sides: dict | None = None) -> dict:
    """The claim judged on every card that has its own run of the experiments it reads: {slug: Side}."""
    sides = card_sides(claim, reference_root, results, config_root) if sides is None else sides
    return {card: side for card, side in sides.items() if side.verdict in JUDGED
            and any(Path(r["_dir"]).is_relative_to(Path(reference_root) / card) for r in side.records.values())}


def _reference_side_on(claim: dict, reference_root: Path, results: Path, config_root: Path | None,
                       gpu: str | None, check_code: bool = True) -> Side:
    """The claim judged on one card's committed reference run of each experiment it reads, with what of
    their code changed since they ran. A CPU experiment (one that reads no GPU's records) is never
    published for a GPU: beside a GPU experiment's reference run, this machine's paper-scale run of
    it stands in. no-reference when an experiment has neither."""
    refs = {}
    for exp in dict.fromkeys(c["experiment"] for c in _conditions(claim)):
        ref_dir = find_reference(reference_root, *layout.split(exp), gpu=gpu)
        refs[exp] = records.read(ref_dir) if ref_dir else None
    cpu = [e for e, r in refs.items() if r is None and gpus_needed(e, config_root) == 0]
    local = []
    if any(r is not None for r in refs.values()):
        for exp in cpu:
            rec = _record(results, exp)
            if rec is not None and rec["status"] == "ok" and rec["scale"] == "paper":
                refs[exp], local = rec, [*local, exp]
    if missing := [e for e, r in refs.items() if r is None]:
        cpu = [e for e in missing if e in cpu]
        return Side("no-reference", why="no committed reference run of " + ", ".join(missing) + (
            f" ({', '.join(cpu)}: a CPU step, which a paper-scale run here stands in for)" if cpu and len(cpu) < len(refs)
            else ""))
    if lacking := [f"{c['experiment']} ({commit_of(refs[c['experiment']], short=True)}) {why}"
                   for c in _conditions(claim) if (why := source_value(refs[c["experiment"]], c)[1])]:
        # A committed run made by older code may lack a metric the ledger reads now (its code did not
        # compute it, or computes it only where a search found a value): no reference value, said so.
        return Side("no-reference", records=refs, why="the reference run of " + "; ".join(lacking) + (
            " (its record's tags and tables say why)"))
    side = _judged(claim, refs, claim.get("timing"))
    _apply_spread(claim, side, Path(reference_root) / gpu if gpu else None)
    _apply_assumed(claim, side, _reference_ceiling(reference_root, gpu))
    _apply_ceiling(claim, side, _reference_ceiling(reference_root, gpu))
    side.details += [f"{exp}: a CPU step, from this machine's paper-scale run" for exp in local]
    for exp, rec in refs.items():
        if check_code and exp not in local and (stale := stale_code(rec, Path(rec["_dir"]).parents[1])):
            side.details.append(f"{exp}: {stale}" if len(refs) > 1 else stale)
    return side


def here_side(claim: dict, results: Path) -> Side:
    """The claim judged on this machine's records: at paper scale against the target; at smoke scale
    shown, not judged; not run here with each record's reason."""
    local = {c["experiment"]: _record(results, c["experiment"]) for c in _conditions(claim)}
    absent = {e: ("not run (no record here)" if r is None else r.get("reason") or r["status"])
              for e, r in local.items() if r is None or r["status"] != "ok"}
    if absent:
        reasons = sorted(set(absent.values()))
        return Side("not-run-here", why="; ".join(reasons) if len(local) == 1 or len(reasons) == 1 else
                    "; ".join(f"{e}: {why}" for e, why in absent.items()))
    if all(r["scale"] == "paper" for r in local.values()):
        side = _judged(claim, local, claim.get("timing"))
        _apply_spread(claim, side, Path(results))  # repeats below results/, as the reference mirrors it
        _apply_assumed(claim, side, _here_ceiling(results, {"paper"}))
        _apply_ceiling(claim, side, _here_ceiling(results, {"paper"}))
        return side
    conds = _conditions(claim)
    values = [(c, *_smoke_value(local[c["experiment"]], c)) for c in conds]
    scales = sorted({r["scale"] for r in local.values()})
    side = Side("smoke", value=values[0][1], records=local, conditions=[(c, v, None) for c, v, _ in values],
                why=f"ran at {'/'.join(scales)} scale: a check of the code path, not judged against the "
                    "paper-scale target")
    side.details += [f"{'/'.join(scales)}-scale value here: {_condition_text(c, v, None)}"
                     + (f" (an estimate: {ESTIMATE_PREFIX}{c.get('key')})" if estimated else "")
                     for c, v, estimated in values if v is not None]
    _apply_assumed(claim, side, _here_ceiling(results, set(scales)), judge=False)
    return side


def _smoke_value(record: dict, cond: dict) -> tuple[float | None, bool]:
    """A smoke record's value of a condition and whether it is an estimate: an experiment that cannot
    measure on the CPU records its model's estimate of a metric ``key`` under ``est_<key>`` instead
    (SuperNeurons' memory: the liveness estimate where no CUDA allocator measures), shown as such. A
    table statistic comes from the smoke run's own table (None where it has none)."""
    if "key" not in cond:
        return source_value(record, cond)[0], False
    metrics, key = record["metrics"], cond["key"]
    if key in metrics:
        return metrics[key], False
    if ESTIMATE_PREFIX + key in metrics:
        return metrics[ESTIMATE_PREFIX + key], True
    return None, False


def load_mlflow_runs(results: Path) -> tuple[str, dict[str, dict]]:
    """The MLflow store's URI and its run of each record id, from repro.pipeline.tracking's summary
    (results/mlflow/ingested.json); ("", {}) where there is none."""
    path = Path(results) / MLFLOW_SUMMARY
    if not path.is_file():
        return "", {}
    summary = json.loads(path.read_text())
    return summary.get("uri", ""), summary.get("runs", {})


def evaluate(claim: dict, results: Path, reference_root: Path, config_root: Path | None = None,
             mlflow_runs: dict[str, dict] | None = None) -> dict:
    """One claim's row: the ledger's fields, both sides' verdicts and values, the records they read,
    and the details behind them (also-conditions, NaN values, stale code, shared GPUs, smoke values)."""
    row = {k: "" for k in CSV_COLUMNS}
    kind = "model" if claim.get("kind") == "model" else "measurement"
    row.update(claim_id=claim["id"], paper=claim["paper"], statement=claim["statement"],
               paper_value=_fmt(claim["paper_value"]), unit=claim["unit"], kind=kind,
               target="" if claim["target"] is None else f"{claim['direction']} {_fmt(claim['target'])}")
    extra = dict(note=claim.get("note", ""), direction=claim["direction"], target_value=claim["target"],
                 paper_value_value=claim["paper_value"], paper_unit=claim.get("paper_unit", ""),
                 reference_value=None, here_value=None, reference_details=[], here_details=[],
                 reference_ceiling_value=None, here_ceiling_value=None, reference_miss_text="", here_miss_text="",
                 reference_records=[], here_records=[], experiments=[])
    metric = claim.get("metric")
    if u := claim.get("unavailable"):
        why = f"unavailable (checked {u['checked']}): {u['why'].strip()}"
        row.update(verdict="unavailable", source="unavailable", needs=str(claim.get("needs", "")),
                   reference_verdict="unavailable", here_verdict="unavailable", here_why=why)
        evidence = [line for line in str(u["evidence"]).strip().splitlines() if line.strip()]
        extra.update(reference_details=[why], here_details=[why, *evidence])
        return {**row, **extra}
    if metric is None or not layout.experiment_path(metric["experiment"], config_root).is_file():
        row.update(verdict="pending", source="not implemented yet", needs=str(claim.get("needs", "")),
                   reference_verdict="pending", here_verdict="pending", here_why="not implemented yet")
        return {**row, **extra}
    row["needs"] = needs_of(claim, config_root)
    extra["experiments"] = list(dict.fromkeys([*(c["experiment"] for c in _conditions(claim)),
                                               *([claim["assumed"]["experiment"]] if claim.get("assumed") else [])]))
    sides = card_sides(claim, reference_root, results, config_root)
    ref = reference_side(claim, reference_root, results, config_root, sides=sides)
    here = here_side(claim, results)
    if others := {card: side for card, side in reference_cards(claim, reference_root, results, config_root, sides).items()
                  if ref.first is None or side.first is None or side.first["_dir"] != ref.first["_dir"]}:
        extra["reference_cards"] = {card: dict(verdict=side.verdict, value=side.value, hardware=hardware_of(side.first),
                                               ceiling=side.ceiling, miss=side.miss)
                                    for card, side in others.items()}
        ref.details += [f"on {hardware_of(side.first)}: {_fmt(side.value)} ({side.verdict.replace('-', ' ')}"
                        + (f"; ceiling {side.ceiling:.4g}" if side.ceiling is not None else "")
                        + (f"; miss: {MISS_LABELS[side.miss]}" + (f", {side.miss_text}" if side.miss_text and
                                                                 side.miss != "ceiling-below-target" else "")
                           if side.miss else "")
                        + f"; {record_path(side.first)})" for side in others.values()]
    ref.details += [f"on {hardware_of(side.first)}: no value ({side.why})" for side in sides.values()
                    if side.verdict == "no-reference" and side.records and side is not ref]
    for name, side in (("reference", ref), ("here", here)):
        extra[f"{name}_value"] = side.value
        extra[f"{name}_details"] = ([side.why] if side.why and name == "here" else []) + side.details
        extra[f"{name}_records"] = [record_path(r) for r in side.records.values()]
        row[f"{name}_verdict"] = side.verdict
        row[f"{name}_measured"] = _fmt(side.value)
        row[f"{name}_ceiling"], row[f"{name}_miss"] = _fmt(side.ceiling), side.miss
        extra[f"{name}_ceiling_value"], extra[f"{name}_miss_text"] = side.ceiling, side.miss_text
        if first := side.first:
            row[f"{name}_record"] = record_path(first)
            row[f"{name}_run_id"] = first.get("record_id", "")
    if ref.verdict == "no-reference":
        extra["reference_details"] = [ref.why, *ref.details]
    else:
        row.update(reference_hardware=hardware_of(ref.first), reference_date=(ref.first.get("started") or "")[:10],
                   reference_commit=commit_of(ref.first, short=True))
    row.update(here_scale="/".join(sorted({r["scale"] for r in here.records.values()})), here_why=here.why)
    if here.first and (run := (mlflow_runs or {}).get(here.first.get("record_id", ""))):
        row["here_mlflow_run"] = run["run_id"]
    chosen, source = ((here, "this-run") if here.verdict in JUDGED else
                      (ref, "reference") if ref.verdict != "no-reference" else (None, "none"))
    verdict = ("model" if kind == "model" and chosen else
               here.verdict if source == "this-run" else "not-run-here")
    row.update(verdict=verdict, source=source)
    if chosen:
        first = chosen.first
        row.update(measured=_fmt(chosen.value), hardware=hardware_of(first), run_id=first["record_id"],
                   commit=commit_of(first))
    return {**row, **extra}


def shared_gpu(recs, timed_inputs: list[str] | None = None) -> str:
    """For a timing claim: which of the records it reads (and, for a CPU step, the records that step
    read; with ``timed_inputs``, only those inputs: the ones whose times the value uses) were
    measured beside other processes on their GPU (provenance.gpu_sharing), so that the report says
    the speeds behind the value are shared-GPU speeds ("" when none was, or none says)."""
    seen, shared = set(), []
    for rec in recs:
        inputs = named_input_records(rec, Path(rec["_dir"]).parents[1]) if "_dir" in rec else None
        inputs = [r for name, r in (inputs or {}).items() if timed_inputs is None or name in timed_inputs]
        for r in [rec, *inputs]:
            n = records.gpu_neighbours(r) or 0
            if n > 0 and r["experiment"] not in seen:
                seen.add(r["experiment"])
                shared.append(f"{r['experiment']} (up to {n})")
    return ("records it read that ran while other processes shared their GPU: " + ", ".join(shared) +
            " neighbours; their times are shared-GPU times") if shared else ""


def build(ledger: Path, results: Path, reference_root: Path, config_root: Path | None = None) -> pd.DataFrame:
    """Every claim's row (evaluate), the claims.csv columns first."""
    _, runs = load_mlflow_runs(results)
    rows = [evaluate(c, results, reference_root, config_root, runs) for c in load_ledger(ledger)]
    frame = pd.DataFrame(rows)
    return frame[CSV_COLUMNS + [c for c in frame.columns if c not in CSV_COLUMNS]] if rows else \
        pd.DataFrame(columns=CSV_COLUMNS + ["note"])


def miss_tally(df: pd.DataFrame, side: str) -> dict[str, int]:
    """How many measured claims (model rows apart) that miss on ``side`` (reference or here) miss in
    each way (MISS_KINDS), and the model rows' under ``model <kind>``."""
    counts = {k: 0 for k in MISS_KINDS} | {f"model {k}": 0 for k in MISS_KINDS}
    for kind, miss in zip(df["kind"], df[f"{side}_miss"]):
        if miss:
            counts[f"model {miss}" if kind == "model" else miss] += 1
    return counts


def tally(df: pd.DataFrame, side: str) -> dict[str, int]:
    """How many measured claims (model rows apart) have each verdict on ``side`` (reference or here),
    and the model rows' verdicts under ``model <verdict>``."""
    verdicts = REFERENCE_VERDICTS if side == "reference" else HERE_VERDICTS
    counts = {v: 0 for v in verdicts} | {f"model {v}": 0 for v in verdicts if v not in UNJUDGED}
    for kind, verdict in zip(df["kind"], df[f"{side}_verdict"]):
        counts[f"model {verdict}" if kind == "model" and verdict not in UNJUDGED else verdict] += 1
    return counts
