"""The claims report: every paper claim beside our measured value and a verdict.

`python -m repro.claims --ledger config/claims --results results --out results/claims`

Verdicts
  reproduced / not-reproduced  measured here, at paper scale, against the target;
  not-run-here                 this machine could not run it (e.g. needs a GPU): `measured` shows
                               the committed reference value and `source` says `reference`;
  model                        a simulator row (a trend model, never a hardware measurement);
  pending                      not implemented yet.
"""

from __future__ import annotations

import argparse
import base64
import html
import math
import operator
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from repro import records
from repro.records import atomic_write_text
from repro import layout, sweep
from repro.reference import find_reference, input_gpu_name, named_input_records, stale_code

COLUMNS = ["claim_id", "paper", "statement", "paper_value", "target", "measured", "unit", "verdict",
           "source", "hardware", "needs", "run_id", "commit"]
VERDICTS = ("reproduced", "not-reproduced", "not-run-here", "model", "pending")
CLAIM_FIELDS = {"id", "paper", "statement", "paper_value", "unit", "target", "direction", "metric", "also",
                "needs", "kind", "timing", "note"}
REQUIRED = {"id", "paper", "statement", "paper_value", "unit", "target", "direction"}
NEEDS = re.compile(r"^(cpu|gpu\d*)$")
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


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
            for cond in [c.get("metric")] + list(c.get("also") or []):
                if cond is not None and not {"experiment", "key"} <= set(cond):
                    raise LedgerError(f"{where}: metric conditions need 'experiment' and 'key'")
            if "needs" in c and not NEEDS.match(str(c["needs"])):
                raise LedgerError(f"{where}: needs must be cpu, gpu or gpu<N>, got {c['needs']!r}")
            if c.get("metric") and "needs" in c:
                raise LedgerError(f"{where}: needs follows from the experiments' gpus; state it only for a "
                                  "pending claim (no metric)")
            claims.append(c)
    return claims


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


def _value(record: dict, key: str, claim_id: str) -> float:
    if key not in record["metrics"]:
        raise LedgerError(f"claim {claim_id}: run record {record['_dir']} has no metric {key!r} "
                          f"(it has {sorted(record['metrics'])})")
    return record["metrics"][key]


def _record(root: Path, experiment: str) -> dict | None:
    path = Path(root) / experiment / records.RECORD_NAME
    return records.read(path) if path.exists() else None


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def evaluate(claim: dict, results: Path, reference_root: Path, config_root: Path | None = None) -> dict:
    row = {k: "" for k in COLUMNS}
    row.update(claim_id=claim["id"], paper=claim["paper"], statement=claim["statement"],
               paper_value=_fmt(claim["paper_value"]), unit=claim["unit"],
               target="" if claim["target"] is None else f"{claim['direction']} {_fmt(claim['target'])}")
    note = claim.get("note", "")
    metric = claim.get("metric")
    if metric is None or not layout.experiment_path(metric["experiment"], config_root).is_file():
        row.update(verdict="pending", source="not implemented yet", needs=str(claim.get("needs", "")))
        return {**row, "note": note}
    row["needs"] = needs_of(claim, config_root)
    conds = [{**metric, "target": claim["target"], "direction": claim["direction"]}] + list(claim.get("also") or [])
    local = {c["experiment"]: _record(results, c["experiment"]) for c in conds}
    here = all(r is not None and r["status"] == "ok" and r["scale"] == "paper" for r in local.values())
    if here:
        recs, source = local, "this-run"
    else:
        refs = {}
        for exp in local:
            paper, _, name = exp.partition("/")
            ref_dir = find_reference(reference_root, paper, name)
            refs[exp] = records.read(ref_dir) if ref_dir else None
        recs, source = refs, "reference"
        reasons = sorted({(r or {}).get("reason") or ("smoke scale" if r else "not run") for r in local.values()})
        note = "; ".join(filter(None, [note, "here: " + ", ".join(reasons)]))
        smoke = [f"{c['key']}={_value(local[c['experiment']], c['key'], claim['id']):.4g}"
                 for c in conds if local[c["experiment"]] and local[c["experiment"]]["status"] == "ok"
                 and c["key"] in local[c["experiment"]]["metrics"]]
        if smoke:
            note += f"; smoke-scale value here: {', '.join(smoke)}"
    first = recs[metric["experiment"]]
    if first is None or any(r is None for r in recs.values()):
        row.update(verdict="not-run-here", source="none",
                   hardware="", measured="")
        return {**row, "note": note + "; no committed reference run"}
    measured = _value(first, metric["key"], claim["id"])
    ok = all(OPS[c["direction"]](_value(recs[c["experiment"]], c["key"], claim["id"]), c["target"]) for c in conds)
    extras = [f"{c['key']}={_value(recs[c['experiment']], c['key'], claim['id']):.4g} ({c['direction']} {c['target']})"
              for c in conds[1:]]
    if extras:
        note = "; ".join(filter(None, [note, "also: " + ", ".join(extras)]))
    prov = first["provenance"]
    hardware = prov.get("gpu_name")
    if not hardware:  # a CPU step: a comparison of one GPU's records is that GPU's result
        combined = input_gpu_name(first, Path(first["_dir"]).parents[1])
        hardware = f"{combined} (CPU step over its records)" if combined else f"CPU {prov.get('cpu', '')}".strip()
    if claim.get("kind") == "model":
        verdict = "model"
    elif source == "this-run":
        verdict = "reproduced" if ok else "not-reproduced"
    else:
        verdict = "not-run-here"
        note += f"; on the reference machine it was {'reproduced' if ok else 'not reproduced'}"
        if stale := stale_code(first, Path(first["_dir"]).parents[1]):
            note += f"; {stale}"
    timing = claim.get("timing")
    if timing and (shared := shared_gpu(recs.values(), None if timing is True else timing)):
        note += f"; {shared}"
    row.update(measured=_fmt(measured), verdict=verdict, source=source,
               hardware=hardware,
               run_id=first["record_id"], commit=prov.get("commit", "") + ("+dirty" if prov.get("dirty") else ""))
    return {**row, "note": note}


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
    rows = [evaluate(c, results, reference_root, config_root) for c in load_ledger(ledger)]
    return pd.DataFrame(rows, columns=COLUMNS + ["note"])


def to_markdown(df: pd.DataFrame) -> str:
    cols = ["claim_id", "paper_value", "target", "measured", "unit", "verdict", "source", "hardware"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(str(r[c]).replace("|", "/") for c in cols) + " |")
    return "\n".join(lines)


def write(df: pd.DataFrame, out: Path, figures: list[Path]) -> None:
    out = Path(out)
    atomic_write_text(out / "claims.csv", df[COLUMNS].to_csv(index=False))
    counts = df.verdict.value_counts().reindex(VERDICTS, fill_value=0)
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    md = ["# Claims report", "", f"{len(df)} claims: {summary}.", "", to_markdown(df), "", "## Notes", ""]
    md += [f"- **{r.claim_id}**: {r.note}" for r in df.itertuples() if r.note]
    md += ["", "## Figures", ""] + [f"![{f.stem}](../figures/{f.parent.name}/{f.name})" for f in figures]
    atomic_write_text(out / "report.md", "\n".join(md) + "\n")
    colors = {"reproduced": "#d4edda", "not-reproduced": "#f8d7da", "not-run-here": "#fff3cd",
              "model": "#d1ecf1", "pending": "#e2e3e5"}
    body = []
    for r in df.itertuples():
        cells = "".join(f"<td>{html.escape(str(getattr(r, c)))}</td>" for c in COLUMNS if c not in ("run_id",))
        body.append(f'<tr style="background:{colors[r.verdict]}">{cells}<td>{html.escape(r.note)}</td></tr>')
    head = "".join(f"<th>{c}</th>" for c in COLUMNS if c != "run_id") + "<th>note</th>"
    imgs = "".join(
        f'<figure><img src="data:image/png;base64,{base64.b64encode(f.read_bytes()).decode()}" '
        f'style="max-width:100%"><figcaption>{html.escape(f.stem)}</figcaption></figure>' for f in figures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>repro claims report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #999;padding:3px 6px;vertical-align:top}}figure{{margin:1em 0}}</style></head>
<body><h1>Claims report</h1><p>{len(df)} claims: {html.escape(summary)}.
Verdicts: reproduced / not-reproduced (measured here at paper scale), not-run-here (this machine
cannot run it; measured = committed reference value), model (simulator), pending (not implemented).</p>
<table><tr>{head}</tr>{''.join(body)}</table><h2>Figures</h2>{imgs}</body></html>"""
    atomic_write_text(out / "report.html", page)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ledger", type=Path, default=Path("config/claims"),
                    help="the claims files' folder (config/claims/<paper>.yaml), or one claims file")
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--reference", type=Path, default=Path("results/reference"))
    ap.add_argument("--config", type=Path, default=None,
                    help="config folder holding experiment/ (default: the repository's); a claim whose "
                         "experiment has no file there is pending")
    ap.add_argument("--figures", type=Path, nargs="*", default=None, help="figure PNGs to embed")
    ap.add_argument("--out", type=Path, default=Path("results/claims"))
    args = ap.parse_args(argv)
    try:
        df = build(args.ledger, args.results, args.reference, args.config)
    except (LedgerError, layout.LayoutError, records.RecordError) as exc:
        print(f"repro.claims: error: {exc}", file=sys.stderr)
        return 2
    figures = args.figures if args.figures is not None else sorted((args.results / "figures").glob("*/*.png"))
    write(df, args.out, figures)
    print(df.verdict.value_counts().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
