"""What both claims reports show (repro.report.html_page, repro.report.markdown_page), computed once from the
claims table (repro.report.claims.build), the experiment runs and the tests (repro.report.artifact): the verdicts'
labels and counts, the per-paper summary, notes split into their short part and the rest, and each
record's provenance in a line.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from repro import layout
from repro.report import artifact, learning
from repro.report.claims import JUDGED, MISS_KINDS, MISS_LABELS, miss_tally, tally

LABELS = {"reproduced": "reproduced", "not-reproduced": "not reproduced",
          "inconclusive": "inconclusive (inside the run-to-run spread)", "no-reference": "no committed run",
          "smoke": "smoke run (not judged)", "not-run-here": "not run here", "pending": "pending",
          "unavailable": "unavailable (cannot run on the machines lent; evidence in the row)"}
MODEL_LABELS = {"reproduced": "model: meets target", "not-reproduced": "model: misses target",
                "inconclusive": "model: inside the spread"}


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def split_note(note: str, sentences: int = 2) -> tuple[str, str]:
    """The first ``sentences`` sentences of a ledger note, and the rest ("" when there is none)."""
    parts = _SENTENCE.split(note.strip()) if note else []
    return " ".join(parts[:sentences]), " ".join(parts[sentences:])


def fmt_value(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def fmt_seconds(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


def fmt_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def verdict_label(verdict: str, kind: str) -> str:
    return MODEL_LABELS.get(verdict, LABELS.get(verdict, verdict)) if kind == "model" else LABELS.get(verdict, verdict)


def _sharing(prov: dict) -> str:
    sharing = prov.get("gpu_sharing")
    if not prov.get("gpu_name"):
        return "CPU step"
    if not isinstance(sharing, dict):
        return "GPU sharing not measured"
    n = sharing.get("gpu_neighbours_max")
    return "GPU sharing unknown" if n is None else "alone on its GPU" if n == 0 else f"GPU shared with up to {n} other processes"


def provenance_line(prov: dict) -> str:
    """GPU, driver, CUDA, torch and GPU sharing of a record, in one line."""
    packages = prov.get("packages") or {}
    parts = [prov.get("gpu_name") or f"CPU {prov.get('cpu_model') or prov.get('cpu') or ''}".strip(),
             prov.get("driver") and f"driver {prov['driver']}", prov.get("cuda") and f"CUDA {prov['cuda']}",
             packages.get("torch") and f"torch {packages['torch']}", _sharing(prov)]
    return " \u00b7 ".join(p for p in parts if p)


def provenance_items(run: dict) -> list[tuple[str, str]]:
    """The rest of a record's provenance, as (name, value) rows."""
    prov = run["provenance"]
    packages = ", ".join(f"{k} {v}" for k, v in sorted((prov.get("packages") or {}).items()))
    items = [("record", run["path"]), ("record id", run["record_id"]), ("started", run["started"]),
             ("commit", (prov.get("commit") or "") + (" (dirty)" if prov.get("dirty") else "")),
             ("host", prov.get("hostname", "")), ("packages", packages), ("python", prov.get("python", "")),
             ("platform", prov.get("platform", "")), ("GPU UUID", prov.get("gpu_uuid", "")),
             ("config hash", prov.get("config_hash", "")), ("code files", str(len(prov.get("code") or {})) or "")]
    return [(k, str(v)) for k, v in items if v]


@dataclass
class Context:
    """Everything both reports show, computed once."""

    df: pd.DataFrame
    out: Path
    figures: list[Path]
    here_runs: dict[str, dict]
    reference_runs: dict[str, dict]
    tests: artifact.TestSuite | None
    badges: list[artifact.Badge]
    mlflow_uri: str
    mlflow_runs: dict[str, dict]
    results: Path
    experiments: list[str]  # the experiment files' '<paper>/<name>' (layout.experiment_names)
    screenshot: str = ""  # the line on the page's screenshot (pages.write): where it is, or why there is none

    def rel(self, path) -> str:
        """``path`` relative to the report's folder (the links work where the report lies)."""
        return Path(os.path.relpath(Path(path).resolve(), self.out.resolve())).as_posix()

    def mlflow_link(self, record_id: str) -> str:
        run = self.mlflow_runs.get(record_id)
        if not run:
            return ""
        base = self.mlflow_uri if self.mlflow_uri.startswith("http") else "http://127.0.0.1:5000"
        return f"{base.rstrip('/')}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"


def machine_here(runs: dict[str, dict], results: Path) -> str:
    """This machine as its runs describe it: host, hardware and scales (or that none ran here)."""
    if not runs:
        return f"no runs under {results}"
    hosts = sorted({r["provenance"].get("hostname", "?") for r in runs.values()})
    gpus = sorted({r["provenance"].get("gpu_name") for r in runs.values() if r["provenance"].get("gpu_name")})
    cpu = next((r["provenance"].get("cpu_model") for r in runs.values() if r["provenance"].get("cpu_model")), "")
    scales = sorted({r["scale"] for r in runs.values() if r["status"] == "ok"})
    hardware = ", ".join(gpus) if gpus else f"CPU {cpu}".strip()
    return f"host {', '.join(hosts)}, {hardware}, {'/'.join(scales) or 'no finished'} scale"


def machine_name(hardware: str) -> str:
    """A record's hardware as the machine that made the numbers (a CPU step over one GPU's records is that GPU's)."""
    return hardware.replace(" (CPU step over its records)", "")


def by_reference_machine(df: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(machine, claims that hold, claims judged) for each reference machine, most claims first: the
    judged claims split by the machine whose run gives each its reference verdict."""
    judged = df[df.reference_verdict.isin(JUDGED)]
    rows = [(name, int((g.reference_verdict == "reproduced").sum()), len(g))
            for name, g in judged.groupby(judged.reference_hardware.map(machine_name))]
    return sorted(rows, key=lambda r: -r[2])


def reference_machine(df: pd.DataFrame) -> str:
    hardware = sorted({machine_name(h) for h in df.reference_hardware if h})
    dates = sorted(d for d in df.reference_date if d)
    span = f"committed runs of {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "") if dates else "no committed runs"
    return f"{', '.join(hardware) or 'none'}; {span}"


# a card's bar: what each part counts, and its colour (the HTML page's legend)
SEGMENTS = {"reproduced": ("hold", "#5cb85c"), "not-reproduced": ("miss", "#d9534f"),
            "inconclusive": ("inconclusive", "#f5a35c"), "ok": ("finished", "#5cb85c"),
            "skipped": ("skipped (its record says why)", "#f0ad4e"), "no-record": ("no record", "#bbb")}


@dataclass
class Card:
    """One side's headline: ``count`` of ``total`` ``what`` (one denominator, stated), the bar's
    parts (n, key of SEGMENTS) summing to ``total``, and the lines under it."""

    side: str
    title: str
    count: int
    total: int
    what: str
    segments: list[tuple[int, str]]
    lines: list[str]

    @property
    def headline(self) -> str:
        return f"{self.count} of {self.total} {self.what}"

    def legend(self) -> list[tuple[int, str, str]]:
        """(n, label, colour) of each part of the bar."""
        return [(n, SEGMENTS[k][0], SEGMENTS[k][1]) for n, k in self.segments]


def _judged(t: dict[str, int]) -> list[tuple[int, str]]:
    return [(t[v] + t.get(f"model {v}", 0), v) for v in JUDGED]


def _models_judged(df: pd.DataFrame, side: str) -> int:
    return int(((df.kind == "model") & df[f"{side}_verdict"].isin(JUDGED)).sum())


def reference_card(ctx: Context) -> Card:
    """The reference machines' card: of the claims judged there, how many hold; the claims not judged
    (no committed run, pending) are named apart, outside the count."""
    df, t = ctx.df, tally(ctx.df, "reference")
    parts = _judged(t)
    total = sum(n for n, _ in parts)
    machines = by_reference_machine(df)
    models = _models_judged(df, "reference")
    lines = [f"Judged: the {total} claims whose committed paper-scale runs have their value"
             + (f" ({models} of them model rows)" if models else "") + f"; {reference_machine(df)}."]
    if len(machines) > 1:
        lines.append(f"Of the {total}, by the machine whose run judges each: "
                     + "; ".join(f"{name}: {n} ({held} hold)" for name, held, n in machines) + ".")
    lines.append(misses_line(df))
    lines.append(f"Not judged, so not counted: {t['no-reference'] + t['model no-reference']} with no committed "
                 f"run, {t['pending']} pending (not implemented), {t['unavailable']} unavailable (no toolchain runs here); "
                 f"{len(df)} claims in all.")
    return Card("reference", "On the reference machine" + ("s" if len(machines) > 1 else ""), parts[0][0], total,
                "judged claims hold", parts, lines)


def here_card(ctx: Context) -> Card:
    """This machine's card. Where it judged claims (runs at paper scale), as the reference card; where
    it judged none (a smoke run), what ran and was checked: the experiments that finished of those the
    report reads, the learning check, and that claims are not judged at that scale."""
    df, t = ctx.df, tally(ctx.df, "here")
    parts = _judged(t)
    total = sum(n for n, _ in parts)
    where = machine_here(ctx.here_runs, ctx.results)
    if total:
        models = _models_judged(df, "here")
        lines = [f"Judged: the {total} claims whose runs here are at paper scale"
                 + (f" ({models} of them model rows)" if models else "") + f"; {where}."]
        if any(df.here_miss):
            lines.append(misses_line(df, "here"))
        lines.append(f"Not judged, so not counted: {t['smoke'] + t['model smoke']} ran at smoke scale, "
                     f"{t['not-run-here'] + t['model not-run-here']} not run here, {t['pending']} pending, "
                     f"{t['unavailable']} unavailable; "
                     f"{len(df)} claims in all.")
        return Card("here", "Here", parts[0][0], total, "judged claims hold", parts, lines)
    statuses = [ctx.here_runs[e]["status"] if e in ctx.here_runs else "no-record" for e in ctx.experiments]
    segments = [(statuses.count(k), k) for k in ("ok", "skipped", "no-record")]
    lines = [f"Of the {len(statuses)} experiment files, by their records here; {where}."]
    if checked := learning.check(ctx.here_runs, ctx.experiments):
        lines.append(checked.line[0].upper() + checked.line[1:] + ".")
    scales = sorted({r["scale"] for r in ctx.here_runs.values() if r["status"] == "ok"})
    lines.append("Claims: none judged here. A claim is judged only on a paper-scale run, and the runs here are at "
                 f"{' and '.join(scales) or 'no'} scale; the reference card judges them.")
    return Card("here", "Here", segments[0][0], len(statuses), "experiments finished", segments, lines)


def cards(ctx: Context) -> list[Card]:
    """The summary's two cards: the reference machines', this machine's."""
    return [reference_card(ctx), here_card(ctx)]


MISS_SHORT = {"implementation": "implementation", "ceiling-below-target": "ceiling below the target",
              "no-ceiling": "no ceiling measured"}


def ceiling_label(r, side: str) -> str:
    """A judged side's ceiling as its cell shows it beside the measured value and the target: "ceiling
    1.627", or "no ceiling" ("" for a side with no verdict against the target)."""
    if getattr(r, f"{side}_verdict") not in JUDGED:
        return ""
    value = fmt_value(getattr(r, f"{side}_ceiling_value", None))
    return f"ceiling {value}" if value else "no ceiling"


def miss_label(r, side: str) -> str:
    """A miss's kind and its number: "miss: implementation, 0.902 of its ceiling" ("" when it holds)."""
    miss = getattr(r, f"{side}_miss", "")
    if not isinstance(miss, str) or not miss:
        return ""
    text = getattr(r, f"{side}_miss_text", "")
    return f"miss: {MISS_SHORT[miss]}" + (f", {text}" if isinstance(text, str) and text else "")


def _misses(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts.get(k, 0)} {MISS_LABELS[k]}" for k in MISS_KINDS)


def misses_by_card(df: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per reference card (its GPU's name): how many measured claims judged there miss in each way,
    the row's own card and every other card named beside it (claims.evaluate's reference_cards)."""
    counts: dict[str, dict[str, int]] = {}
    for r in df[df.kind != "model"].itertuples():
        others = getattr(r, "reference_cards", None)
        sides = ([(machine_name(r.reference_hardware), r.reference_verdict, r.reference_miss)]
                 + [(machine_name(c["hardware"]), c["verdict"], c.get("miss", ""))
                    for c in (others.values() if isinstance(others, dict) else [])])
        for card, verdict, miss in sides:
            if verdict in JUDGED and card:
                counts.setdefault(card, {k: 0 for k in MISS_KINDS})
                if miss:
                    counts[card][miss] += 1
    return counts


def misses_line(df: pd.DataFrame, side: str = "reference") -> str:
    """The misses of ``side`` by kind, one sentence: implementation short of its ceiling, ceiling below
    the target, no ceiling measured (claims._apply_ceiling); model rows apart; on the reference side,
    each card's own where more than one card judges claims."""
    t = miss_tally(df, side)
    n = sum(t[k] for k in MISS_KINDS)
    models = sum(t[f"model {k}"] for k in MISS_KINDS)
    text = (f"{'On the reference machine' if side == 'reference' else 'Here'}, the {n} measured claims that miss, by "
            f"kind: {_misses(t)}")
    if models:
        text += "; model rows: " + ", ".join(f"{t[f'model {k}']} {MISS_LABELS[k]}" for k in MISS_KINDS if t[f"model {k}"])
    if side == "reference" and len(cards := misses_by_card(df)) > 1:
        text += ". Each card's own misses: " + "; ".join(f"{card}: {_misses(c)}" for card, c in cards.items())
    return text + "."


# how a per-paper cell names each verdict's count
CELL_LABELS = {"reproduced": "held", "not-reproduced": "missed", "inconclusive": "inconclusive",
               "no-reference": "no committed run", "smoke": "smoke run (not judged)", "not-run-here": "not run here",
               "pending": "pending", "unavailable": "unavailable"}


def count_cell(verdicts: pd.Series, order) -> str:
    """A per-paper cell: each verdict's count with its label ("2 held, 1 missed"), zeros left out; "-"
    where none of ``order`` occurs."""
    counts = verdicts.value_counts()
    return ", ".join(f"{counts[v]} {CELL_LABELS[v]}" for v in order if counts.get(v, 0)) or "-"


def per_paper(df: pd.DataFrame) -> pd.DataFrame:
    """Per paper (ledger order): its claims, their verdicts on the reference machine and here as
    labelled counts, the pending ones, and the reference hardware."""
    rows = []
    for paper, group in df.groupby("paper", sort=False):
        kinds = group.kind.value_counts()
        rows.append({"paper": paper,
                     "claims": f"{len(group)}" + ("" if set(kinds.index) == {"measurement"} else
                                                  f" ({', '.join(f'{n} {k}' for k, n in kinds.items())})"),
                     "reference machine": count_cell(group.reference_verdict, (*JUDGED, "no-reference")),
                     "here": count_cell(group.here_verdict, (*JUDGED, "smoke", "not-run-here")),
                     "pending": count_cell(group.here_verdict, ("pending", "unavailable")),
                     "reference hardware": ", ".join(sorted({machine_name(h) for h in group.reference_hardware if h}))
                                           or "-"})
    return pd.DataFrame(rows)


def figure_key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def figure_source(ctx: Context, path: Path) -> str:
    key = figure_key(path)
    if Path(ctx.results).resolve() in path.resolve().parents:
        run = ctx.here_runs.get(key)
        return f"this run, {run['scale']} scale" if run and run["status"] == "ok" else "reference run, drawn here"
    return "reference run"


def paper_page(experiments: list[str]) -> Path | None:
    if not experiments:
        return None
    page = layout.REPO_ROOT / "docs" / "papers" / f"{layout.split(experiments[0])[0]}.md"
    return page if page.is_file() else None


def runs_rows(ctx: Context) -> list[dict]:
    """One row per experiment: its reference run and its run here (artifact.experiment_runs)."""
    return [dict(experiment=e, reference=ctx.reference_runs.get(e), here=ctx.here_runs.get(e))
            for e in sorted({*ctx.reference_runs, *ctx.here_runs})]


def cost(run: dict) -> tuple[str, str]:
    points = run.get("points") or {}
    time = fmt_seconds((run["duration_s"] or 0) + points.get("duration_s", 0)) if run["duration_s"] is not None else ""
    disk = fmt_bytes(run["disk_bytes"] + points.get("disk_bytes", 0))
    if points.get("n"):
        time += f" (with {points['n']} points)"
    return time, disk


def totals(runs: dict[str, dict]) -> str:
    seconds = sum((r["duration_s"] or 0) + r["points"]["duration_s"] for r in runs.values())
    disk = sum(r["disk_bytes"] + r["points"]["disk_bytes"] for r in runs.values())
    return f"{len(runs)} experiments, {fmt_seconds(seconds)}, {fmt_bytes(disk)}"


COMMANDS = [("make", "set up .venv, then the whole DAG: paper scale with a CUDA GPU, smoke scale without"),
            ("make test", "the tests; writes their JUnit XML, which this report reads"),
            ("python -m repro.pipeline.run experiment=<paper>/<name> scale=paper", "one experiment by hand (Hydra)"),
            ("snakemake --cores all results/figures/<paper>/<name>.png", "one figure and only what it needs"),
            ("snakemake --cores all results/claims/report.html", "this report"),
            ("python -m repro.pipeline.reference status --stale", "the committed records whose code changed since they ran")]
