"""The claims report's files, from the claims table (repro.claims.build): claims.csv, claims_chart.png,
report.md (terminals and pull requests) and report.html (the front page: self-contained for its text,
picture and thumbnails).

Both reports carry the same sections: the two verdicts' counts (the reference machine's and this
machine's), a summary per paper and the picture of every claim (repro.claims_chart), the claims
with both verdicts, the values linked to their records and a short note (the rest behind a
disclosure), the figures (thumbnails linking to the full PNG and PDF), and what an artifact
committee checks (repro.artifact): the badges' evidence, the commands, the tests, and each
experiment's time, disk and provenance.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from repro import artifact, claims_chart, layout
from repro.atomic import atomic_write
from repro.claims import CSV_COLUMNS, load_mlflow_runs, tally
from repro.provenance import git_state
from repro.records import atomic_write_text

THUMB_SIZE = (360, 250)  # px, the most a thumbnail spans: about 5-10 kB each
LABELS = {"reproduced": "reproduced", "not-reproduced": "not reproduced", "no-reference": "no committed run",
          "smoke": "smoke run (not judged)", "not-run-here": "not run here", "pending": "pending"}
MODEL_LABELS = {"reproduced": "model: meets target", "not-reproduced": "model: misses target"}


def default_figures(results: Path, reference_root: Path) -> list[Path]:
    """The figures drawn here (results/figures/<paper>/*.png), and the reference machines' for the
    experiments that have none here."""
    here = sorted(Path(results).glob("figures/*/*.png"))
    seen = {(p.parent.name, p.stem) for p in here}
    refs = []
    for p in sorted(Path(reference_root).glob("*/figures/*/*.png")):
        if (p.parent.name, p.stem) not in seen:
            seen.add((p.parent.name, p.stem))
            refs.append(p)
    return here + refs


def thumbnail(png: Path, size: tuple[int, int] = THUMB_SIZE) -> bytes:
    """A small PNG of a figure: within ``size`` pixels, a palette of 32 colours."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    image.thumbnail(size)
    out = io.BytesIO()
    image.quantize(colors=32).save(out, format="PNG", optimize=True)
    return out.getvalue()


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def split_note(note: str, sentences: int = 2) -> tuple[str, str]:
    """The first ``sentences`` sentences of a ledger note, and the rest ("" when there is none)."""
    parts = _SENTENCE.split(note.strip()) if note else []
    return " ".join(parts[:sentences]), " ".join(parts[sentences:])


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _seconds(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _verdict_label(verdict: str, kind: str) -> str:
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

    def rel(self, path) -> str:
        """``path`` relative to the report's folder (the links work where the report lies)."""
        return Path(os.path.relpath(Path(path).resolve(), self.out.resolve())).as_posix()

    def mlflow_link(self, record_id: str) -> str:
        run = self.mlflow_runs.get(record_id)
        if not run:
            return ""
        base = self.mlflow_uri if self.mlflow_uri.startswith("http") else "http://127.0.0.1:5000"
        return f"{base.rstrip('/')}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"

    def run_of(self, path: str) -> dict | None:
        """The experiment run (artifact.experiment_runs) whose record is ``path``."""
        resolved = Path(path).resolve()
        return next((r for r in [*self.reference_runs.values(), *self.here_runs.values()]
                     if Path(r["path"]).resolve() == resolved), None)


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


def reference_machine(df: pd.DataFrame) -> str:
    hardware = sorted({h.replace(" (CPU step over its records)", "") for h in df.reference_hardware if h})
    dates = sorted(d for d in df.reference_date if d)
    span = f"committed runs of {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "") if dates else "no committed runs"
    return f"{', '.join(hardware) or 'none'}; {span}"


def summary_lines(ctx: Context) -> tuple[str, str]:
    """The two verdicts' counts, one sentence each (the reference machine's, this machine's)."""
    ref, here = tally(ctx.df, "reference"), tally(ctx.df, "here")
    measured = int((ctx.df.kind != "model").sum())
    models = int((ctx.df.kind == "model").sum())

    def models_part(t):
        if not models:
            return ""
        shown = {k[len("model "):]: n for k, n in t.items() if k.startswith("model ") and n}
        return "; model rows: " + ", ".join(f"{n} {MODEL_LABELS.get(v, LABELS[v]).replace('model: ', '')}"
                                            for v, n in shown.items())

    reference = (f"On the reference machine ({reference_machine(ctx.df)}): {ref['reproduced']} of {measured} measured "
                 f"claims reproduced, {ref['not-reproduced']} not reproduced, {ref['no-reference']} with no committed "
                 f"run, {ref['pending']} pending" + models_part(ref) + ".")
    here_line = (f"Here ({machine_here(ctx.here_runs, ctx.results)}): {here['reproduced']} reproduced, "
                 f"{here['not-reproduced']} not reproduced, {here['smoke']} ran at smoke scale (not judged), "
                 f"{here['not-run-here']} not run here, {here['pending']} pending" + models_part(here) + ".")
    return reference, here_line


def per_paper(df: pd.DataFrame) -> pd.DataFrame:
    """Per paper (ledger order): its claims, how many hold / miss / have no committed run on the
    reference machine and hold / miss / ran at smoke scale / did not run here, and the reference hardware."""
    rows = []
    for paper, group in df.groupby("paper", sort=False):
        kinds = group.kind.value_counts()
        ref, here = group.reference_verdict, group.here_verdict
        rows.append({"paper": paper,
                     "claims": f"{len(group)}" + ("" if set(kinds.index) == {"measurement"} else
                                                  f" ({', '.join(f'{n} {k}' for k, n in kinds.items())})"),
                     "reference: held / missed / no run": f"{(ref == 'reproduced').sum()} / "
                                                         f"{(ref == 'not-reproduced').sum()} / {(ref == 'no-reference').sum()}",
                     "here: held / missed / smoke / not run": f"{(here == 'reproduced').sum()} / "
                                                              f"{(here == 'not-reproduced').sum()} / {(here == 'smoke').sum()} / "
                                                              f"{(here == 'not-run-here').sum()}",
                     "pending": int((here == "pending").sum()),
                     "reference hardware": ", ".join(sorted({h.replace(" (CPU step over its records)", "")
                                                             for h in group.reference_hardware if h})) or "-"})
    return pd.DataFrame(rows)


def _figure_key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _figure_source(ctx: Context, path: Path) -> str:
    key = _figure_key(path)
    if Path(ctx.results).resolve() in path.resolve().parents:
        run = ctx.here_runs.get(key)
        return f"this run, {run['scale']} scale" if run and run["status"] == "ok" else "reference run, drawn here"
    return "reference run"


def _paper_page(experiments: list[str]) -> Path | None:
    if not experiments:
        return None
    page = layout.REPO_ROOT / "docs" / "papers" / f"{layout.split(experiments[0])[0]}.md"
    return page if page.is_file() else None


# ---- HTML -----------------------------------------------------------------------------------------

E = html.escape
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em 2em;color:#222;max-width:1500px}
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555;margin:0 0 1em}.cards{display:flex;gap:1em;flex-wrap:wrap}
.card{flex:1 1 420px;border:1px solid #ccc;border-radius:6px;padding:.6em 1em;background:#fafafa}
.card h2{border:0;margin:.1em 0;font-size:1.05em}.big{font-size:1.6em;margin:.1em 0}
.card p{margin:.3em 0}.bar{display:flex;height:12px;border-radius:3px;overflow:hidden;margin:.4em 0}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}.num{text-align:right}small,.small{color:#555;font-size:11.5px}
.pill{display:inline-block;border-radius:9px;padding:0 7px;font-size:11.5px;white-space:nowrap;margin:1px 0}
.v-reproduced{background:#d4edda;color:#155724}.v-not-reproduced{background:#f8d7da;color:#721c24}
.v-no-reference,.v-pending{background:#e2e3e5;color:#383d41}.v-smoke{background:#d1ecf1;color:#0c5460}
.v-not-run-here{background:#fff3cd;color:#856404}.model{background:#e8dff5;color:#4a2a7a}
tr.claim:target{outline:2px solid #4a90d9}details summary{cursor:pointer;color:#245;font-size:12px}
.glance{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}.glance>div:first-child{flex:1 1 440px}.glance>div+div{flex:0 1 760px;max-width:760px}
.glance img{max-width:100%;border:1px solid #eee}
.figs{display:flex;flex-wrap:wrap;gap:10px}.figs figure{margin:0;width:370px;border:1px solid #e3e3e3;padding:4px}
.figs img{max-width:100%;height:auto;display:block;margin:auto}.figs figcaption{font-size:12px}
.badge td:first-child{font-weight:bold;white-space:nowrap}ul{margin:.2em 0;padding-left:1.2em}
code{background:#f4f4f4;padding:0 3px;border-radius:3px}
"""


def _pill(verdict: str, kind: str, side: str) -> str:
    return (f'<span class="pill v-{E(verdict)}" data-side="{side}" data-verdict="{E(verdict)}">'
            f'{E(_verdict_label(verdict, kind))}</span>')


def _bar(counts: list[tuple[int, str]]) -> str:
    total = sum(n for n, _ in counts) or 1
    colours = {"reproduced": "#5cb85c", "not-reproduced": "#d9534f", "smoke": "#5bc0de", "not-run-here": "#f0ad4e",
               "no-reference": "#bbb", "pending": "#ddd"}
    return '<div class="bar">' + "".join(
        f'<span style="width:{100 * n / total:.2f}%;background:{colours[v]}" title="{n} {E(LABELS[v])}"></span>'
        for n, v in counts if n) + "</div>"


CARD_ORDER = ("reproduced", "not-reproduced", "smoke", "not-run-here", "no-reference", "pending")


def _card(title: str, line: str, t: dict, side: str) -> str:
    """One side's headline: how many claims hold of all, a bar of the verdicts, the counts' sentence."""
    counts = [(t.get(v, 0) + t.get(f"model {v}", 0), v) for v in CARD_ORDER]
    total = sum(n for n, _ in counts)
    return (f'<div class="card" id="verdicts-{side}"><h2>{E(title)}</h2>'
            f'<p class="big"><b>{counts[0][0]}</b> of {total} claims hold</p>{_bar(counts)}'
            f'<p class="small">{E(line)}</p></div>')


def _record_link(ctx: Context, path: str, text: str, record_id: str) -> str:
    link = f'<a href="{E(ctx.rel(path))}" title="{E(path)} (record {E(record_id)})">{E(text)}</a>'
    return link + (f' <a class="small" href="#rec-{E(record_id)}">provenance</a>' if record_id else "")


def _side_cell(ctx: Context, r, side: str) -> str:
    verdict, kind = getattr(r, f"{side}_verdict"), r.kind
    value, record, record_id = _num(getattr(r, f"{side}_value")), getattr(r, f"{side}_record"), getattr(r, f"{side}_run_id")
    parts = [_pill(verdict, kind, side)]
    if record:
        shown = value or ("no value" if verdict in ("reproduced", "not-reproduced") else "record")
        parts.append("<br>" + _record_link(ctx, record, shown, record_id))
    if side == "reference" and r.reference_date:
        parts.append(f'<br><small>{E(r.reference_hardware)} \u00b7 {E(r.reference_date)} \u00b7 '
                     f'<code>{E(r.reference_commit)}</code></small>')
    if side == "here":
        if r.here_why:
            parts.append(f"<br><small>{E(r.here_why)}</small>")
        if link := ctx.mlflow_link(r.here_run_id):
            parts.append(f'<br><a class="small" href="{E(link)}" title="make mlflow-ui">MLflow run</a>')
    return f'<td class="verdict" data-side="{side}">{"".join(parts)}</td>'


def _details(ctx: Context, r) -> str:
    head, rest = split_note(r.note)
    items = []
    if rest:
        items.append(f"<p>{E(rest)}</p>")
    for side, title in (("reference", "On the reference machine"), ("here", "Here")):
        notes = [n for n in getattr(r, f"{side}_details") if n]
        if notes:
            items.append(f"<p><b>{title}</b></p><ul>" + "".join(f"<li>{E(n)}</li>" for n in notes) + "</ul>")
    recs = [*r.reference_records, *r.here_records]
    if recs:
        items.append("<p><b>Records</b></p><ul>" + "".join(
            f'<li><a href="{E(ctx.rel(p))}">{E(p)}</a></li>' for p in dict.fromkeys(recs)) + "</ul>")
    figs = [e for e in r.experiments if any(_figure_key(f) == e for f in ctx.figures)]
    if figs:
        items.append("<p><b>Figures</b>: " + ", ".join(f'<a href="#fig-{E(e.replace("/", "-"))}">{E(e)}</a>'
                                                        for e in figs) + "</p>")
    if page := _paper_page(r.experiments):
        items.append(f'<p>Paper page: <a href="{E(ctx.rel(page))}">docs/papers/{E(page.name)}</a></p>')
    more = f"<details><summary>more</summary>{''.join(items)}</details>" if items else ""
    return f"<td>{E(head)}{more}</td>"


def _claims_table(ctx: Context) -> str:
    head = ("<tr><th>claim</th><th>target</th><th>reference machine</th><th>here</th><th>note</th></tr>")
    rows = []
    for r in ctx.df.itertuples():
        model = ' <span class="pill model">model</span>' if r.kind == "model" else ""
        paper = (f"<br><small>paper: {E(r.paper_value)}" + (f" ({E(r.paper_unit)})" if r.paper_unit else "") + "</small>"
                 if r.paper_value else "")
        rows.append(
            f'<tr class="claim" id="claim-{E(r.claim_id)}" data-claim="{E(r.claim_id)}" '
            f'data-reference="{E(r.reference_verdict)}" data-here="{E(r.here_verdict)}">'
            f'<td><b>{E(r.claim_id)}</b>{model}<br><small>{E(r.paper)}: {E(r.statement)}</small></td>'
            f'<td>{E(r.target)}{paper}<br><small>{E(r.unit)}</small></td>'
            f'{_side_cell(ctx, r, "reference")}{_side_cell(ctx, r, "here")}{_details(ctx, r)}</tr>')
    return f"<table id=\"claims-table\">{head}{''.join(rows)}</table>"


def _table(frame: pd.DataFrame, table_id: str) -> str:
    head = "".join(f"<th>{E(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if isinstance(v, (int, float)) else ""}>{E(str(v))}</td>'
                                    for v in row) + "</tr>" for row in frame.itertuples(index=False))
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _figures_html(ctx: Context) -> str:
    if not ctx.figures:
        return "<p>No figures.</p>"
    parts = []
    for paper in dict.fromkeys(f.parent.name for f in ctx.figures):
        figs = []
        for f in (f for f in ctx.figures if f.parent.name == paper):
            data = base64.b64encode(thumbnail(f)).decode()
            pdf = f.with_suffix(".pdf")
            links = f'<a href="{E(ctx.rel(f))}">PNG</a>' + (f' \u00b7 <a href="{E(ctx.rel(pdf))}">PDF</a>'
                                                             if pdf.is_file() else "")
            figs.append(f'<figure id="fig-{E(paper)}-{E(f.stem)}"><a href="{E(ctx.rel(f))}" class="thumb">'
                        f'<img src="data:image/png;base64,{data}" alt="{E(paper)}/{E(f.stem)}" loading="lazy"></a>'
                        f'<figcaption><b>{E(f.stem)}</b> \u00b7 {links} \u00b7 <span class="small">'
                        f'{E(_figure_source(ctx, f))}</span></figcaption></figure>')
        parts.append(f'<h3>{E(paper)}</h3><div class="figs">{"".join(figs)}</div>')
    return "".join(parts)


def _runs_rows(ctx: Context) -> list[dict]:
    """One row per experiment: its reference run and its run here (artifact.experiment_runs)."""
    return [dict(experiment=e, reference=ctx.reference_runs.get(e), here=ctx.here_runs.get(e))
            for e in sorted({*ctx.reference_runs, *ctx.here_runs})]


def _cost(run: dict) -> tuple[str, str]:
    points = run.get("points") or {}
    time = _seconds((run["duration_s"] or 0) + points.get("duration_s", 0)) if run["duration_s"] is not None else ""
    disk = _bytes(run["disk_bytes"] + points.get("disk_bytes", 0))
    if points.get("n"):
        time += f" (with {points['n']} points)"
    return time, disk


def _run_cell(ctx: Context, run: dict | None) -> str:
    if run is None:
        return "<td>-</td>"
    time, disk = _cost(run)
    status = run["status"] + (f" ({run['reason']})" if run["reason"] else "")
    items = "".join(f"<tr><th>{E(k)}</th><td>{E(v)}</td></tr>" for k, v in provenance_items(run))
    mlflow = ctx.mlflow_link(run["record_id"])
    return (f'<td id="rec-{E(run["record_id"])}"><a href="{E(ctx.rel(run["path"]))}">{E(status)}, {E(run["scale"])}</a>'
            f' \u00b7 {E(run["started"][:10])} \u00b7 <code>{E((run["provenance"].get("commit") or "")[:7])}</code>'
            f' \u00b7 {E(time)} \u00b7 {E(disk)}<br><small>{E(provenance_line(run["provenance"]))}</small>'
            + (f' \u00b7 <a class="small" href="{E(mlflow)}">MLflow run</a>' if mlflow else "")
            + f'<details><summary>provenance</summary><table>{items}</table></details></td>')


def _totals(runs: dict[str, dict]) -> str:
    seconds = sum((r["duration_s"] or 0) + r["points"]["duration_s"] for r in runs.values())
    disk = sum(r["disk_bytes"] + r["points"]["disk_bytes"] for r in runs.values())
    return f"{len(runs)} experiments, {_seconds(seconds)}, {_bytes(disk)}"


COMMANDS = [("make", "set up .venv, then the whole DAG: paper scale with a CUDA GPU, smoke scale without"),
            ("make test", "the tests; writes results/tests/junit.xml, which this report reads"),
            ("python -m repro.run experiment=<paper>/<name> scale=paper", "one experiment by hand (Hydra)"),
            ("snakemake --cores all results/figures/<paper>/<name>.png", "one figure and only what it needs"),
            ("snakemake --cores all results/claims/report.html", "this report"),
            ("python -m repro.reference status --stale", "the committed records whose code changed since they ran")]


def _tests_html(ctx: Context) -> str:
    t = ctx.tests
    if t is None:
        return "<p>No test results: <code>make test</code> writes results/tests/junit.xml.</p>"
    folders = pd.DataFrame([{"tests/": k, "passed": c["passed"], "failed": c["failed"], "skipped": c["skipped"]}
                            for k, c in sorted(t.by_folder.items())])
    reasons = "".join(f"<li>{n} \u00d7 {E(m)}</li>" for m, n in t.skip_reasons.most_common(6))
    failed = "".join(f"<li><code>{E(f)}</code></li>" for f in t.failures[:20])
    return (f'<p id="tests-summary">{t.passed} passed, {t.failed} failed, {t.skipped} skipped of {t.tests} tests '
            f'({E(t.when)} UTC, {t.seconds:.0f} s; <a href="{E(ctx.rel(t.path))}">{E(t.path.name)}</a>).</p>'
            + (f"<p>Failed:</p><ul>{failed}</ul>" if failed else "")
            + (f"<p>Skipped, by reason:</p><ul>{reasons}</ul>" if reasons else "")
            + f"<details><summary>by test folder</summary>{_table(folders, 'tests-by-folder')}</details>")


def _artifact_html(ctx: Context) -> str:
    badges = "".join(f'<tr><td>{E(b.name)}</td><td><ul>{"".join(f"<li>{E(x)}</li>" for x in b.evidence)}</ul></td>'
                     f'<td><ul>{"".join(f"<li>{E(x)}</li>" for x in b.missing)}</ul></td></tr>' for b in ctx.badges)
    commands = "".join(f"<tr><td><code>{E(c)}</code></td><td>{E(w)}</td></tr>" for c, w in COMMANDS)
    runs = "".join(f'<tr><td><b>{E(r["experiment"])}</b></td>{_run_cell(ctx, r["reference"])}'
                   f'{_run_cell(ctx, r["here"])}</tr>' for r in _runs_rows(ctx))
    return (f'<h3>ACM badges: the evidence in this run</h3><table class="badge" id="badges"><tr><th>badge</th>'
            f'<th>evidence</th><th>missing</th></tr>{badges}</table>'
            f'<h3>Commands</h3><table id="commands">{commands}</table>'
            f'<h3>Tests</h3>{_tests_html(ctx)}'
            f'<h3>Each experiment: time, disk, provenance</h3><p class="small">Reference machine: '
            f'{E(_totals(ctx.reference_runs))}. Here: {E(_totals(ctx.here_runs))}. Time is the record\'s '
            f'duration_s (a sweep\'s with its points\'), disk its run folder.</p>'
            f'<table id="runs"><tr><th>experiment</th><th>reference machine</th><th>here</th></tr>{runs}</table>')


def to_html(ctx: Context, chart: bytes) -> str:
    ref_line, here_line = summary_lines(ctx)
    df = ctx.df
    glance = per_paper(df)
    chart_img = base64.b64encode(chart).decode()
    commit = git_state()["commit"][:7]
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>repro claims report</title>
<style>{CSS}</style></head><body>
<h1>Claims report</h1>
<p class="sub">{len(df)} claims of {df.paper.nunique()} papers, each judged on the reference machine (the
committed paper-scale runs) and here (this machine's run). Built at commit <code>{E(commit)}</code>.</p>
<div class="cards" id="summary">{_card("On the reference machine", ref_line, tally(df, "reference"), "reference")}
{_card("Here", here_line, tally(df, "here"), "here")}</div>
<h2 id="glance">At a glance</h2>
<div class="glance"><div>{_table(glance, "per-paper")}<p class="small">held: every condition of the claim
holds; missed: one does not; no run: no committed reference run; smoke: ran here at the smoke scale (not
judged against a paper-scale target).</p></div>
<div><img id="chart" src="data:image/png;base64,{chart_img}" alt="every claim against its target"
width="760"><p class="small">{E(claims_chart.__doc__.split(chr(10) + chr(10))[1].replace(chr(10), " "))}</p></div></div>
<h2 id="claims">Claims</h2>{_claims_table(ctx)}
<h2 id="figures">Figures</h2><p class="small">Thumbnails; each links to its full PNG and PDF.</p>{_figures_html(ctx)}
<h2 id="artifact">For an artifact committee</h2>{_artifact_html(ctx)}
</body></html>
"""


# ---- Markdown -------------------------------------------------------------------------------------

def _md(x) -> str:
    return str(x).replace("|", "/").replace("\n", " ")


def _md_table(frame: pd.DataFrame) -> list[str]:
    lines = ["| " + " | ".join(map(_md, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return lines + ["| " + " | ".join(map(_md, row)) + " |" for row in frame.itertuples(index=False)]


def _md_side(ctx: Context, r, side: str) -> str:
    verdict = _verdict_label(getattr(r, f"{side}_verdict"), r.kind)
    value, record = _num(getattr(r, f"{side}_value")), getattr(r, f"{side}_record")
    text = f"**{verdict}**" + (f" [{value or 'record'}]({ctx.rel(record)})" if record else "")
    if side == "reference" and r.reference_date:
        text += f" ({r.reference_date}, `{r.reference_commit}`)"
    if side == "here" and r.here_why:
        text += f" ({r.here_why})"
    return text


def to_markdown(ctx: Context) -> str:
    ref_line, here_line = summary_lines(ctx)
    df = ctx.df
    lines = ["# Claims report", "", f"{len(df)} claims of {df.paper.nunique()} papers.", "", f"- {ref_line}",
             f"- {here_line}", "", "## At a glance", "", *_md_table(per_paper(df)), "",
             "![every claim against its target](claims_chart.png)", "", "## Claims", ""]
    lines += _md_table(pd.DataFrame([{"claim": f"**{r.claim_id}**" + (" (model)" if r.kind == "model" else ""),
                                      "target": f"{r.target} {r.unit}",
                                      "paper": r.paper_value + (f" ({r.paper_unit})" if r.paper_unit else ""),
                                      "reference machine": _md_side(ctx, r, "reference"),
                                      "here": _md_side(ctx, r, "here"), "note": split_note(r.note)[0]}
                                     for r in df.itertuples()]))
    lines += ["", "### Details", ""]
    for r in df.itertuples():
        rest = split_note(r.note)[1]
        notes = ([rest] if rest else []) + [f"reference: {n}" for n in r.reference_details if n] + \
                [f"here: {n}" for n in r.here_details if n]
        if notes:
            lines += [f"- **{r.claim_id}**"] + [f"  - {_md(n)}" for n in notes]
    lines += ["", "## Figures", ""]
    for paper in dict.fromkeys(f.parent.name for f in ctx.figures):
        links = [f"[{f.stem}]({ctx.rel(f)})" + (f" ([pdf]({ctx.rel(f.with_suffix('.pdf'))}))"
                                                if f.with_suffix(".pdf").is_file() else "")
                 for f in ctx.figures if f.parent.name == paper]
        lines.append(f"- {paper}: " + ", ".join(links))
    lines += ["", "## For an artifact committee", "", "### ACM badges: the evidence in this run", ""]
    for b in ctx.badges:
        lines += [f"- **{b.name}**"] + [f"  - {_md(x)}" for x in b.evidence] + [f"  - missing: {_md(x)}" for x in b.missing]
    lines += ["", "### Commands", ""] + [f"- `{c}`: {w}" for c, w in COMMANDS]
    t = ctx.tests
    lines += ["", "### Tests", "", (f"{t.passed} passed, {t.failed} failed, {t.skipped} skipped of {t.tests} "
                                    f"({t.when} UTC, {t.seconds:.0f} s; {ctx.rel(t.path)})" if t else
                                    "No test results: `make test` writes results/tests/junit.xml.")]
    if t:
        lines += [f"- failed: `{f}`" for f in t.failures[:20]] + \
                 [f"- skipped {n}x: {m}" for m, n in t.skip_reasons.most_common(6)]
    lines += ["", "### Each experiment: time, disk, provenance", "",
              f"Reference machine: {_totals(ctx.reference_runs)}. Here: {_totals(ctx.here_runs)}.", ""]
    rows = []
    for r in _runs_rows(ctx):
        cells = {"experiment": r["experiment"]}
        for side in ("reference", "here"):
            run = r[side]
            if run is None:
                cells[side] = "-"
                continue
            time, disk = _cost(run)
            cells[side] = (f"[{run['status']}, {run['scale']}]({ctx.rel(run['path'])}) {run['started'][:10]} "
                           f"`{(run['provenance'].get('commit') or '')[:7]}` {time} {disk}; "
                           f"{provenance_line(run['provenance'])}")
        rows.append(cells)
    lines += _md_table(pd.DataFrame(rows, columns=["experiment", "reference", "here"]))
    return "\n".join(lines) + "\n"


def write(df: pd.DataFrame, out: Path, figures: list[Path], results: Path, reference_root: Path,
          junit: Path | None = None, config_root: Path | None = None) -> Path:
    """Write claims.csv, claims_chart.png, report.md and report.html to ``out``; returns the page's path.
    ``config_root`` holds the experiment files (the repository's config by default)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "claims.csv", df[CSV_COLUMNS].to_csv(index=False))
    here_runs = artifact.experiment_runs(results, config_root)
    ref_runs = artifact.reference_runs(reference_root, config_root)
    tests = artifact.junit(junit) if junit else None
    uri, runs = load_mlflow_runs(results)
    ctx = Context(df=df, out=out, figures=[Path(f) for f in figures], here_runs=here_runs, reference_runs=ref_runs,
                  tests=tests, badges=artifact.badges(df, here_runs, ref_runs, tests, reference_root),
                  mlflow_uri=uri, mlflow_runs=runs, results=Path(results))
    chart = claims_chart.png(df)
    atomic_write(out / "claims_chart.png", lambda fh: fh.write(chart))
    atomic_write_text(out / "report.md", to_markdown(ctx))
    atomic_write_text(out / "report.html", to_html(ctx, chart))
    return out / "report.html"
