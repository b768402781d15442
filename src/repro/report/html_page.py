"""The claims report as one self-contained HTML page (its text, picture and thumbnails inline; links to
the records, full figures and MLflow runs), from repro.report.content's Context."""

from __future__ import annotations

import base64
import html
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from repro.report import chart as claims_chart
from repro.pipeline.provenance import git_state
from repro.report.content import (COMMANDS, Card, Context, cards, ceiling_label, cost, fmt_value, figure_key,
                                  figure_source, miss_label, paper_page, per_paper, provenance_items, provenance_line,
                                  runs_rows, split_note, totals, verdict_label)

THUMB_SIZE = (360, 250)  # px, the most a thumbnail spans: about 5-10 kB each


def thumbnail(png: Path, size: tuple[int, int] = THUMB_SIZE) -> bytes:
    """A small PNG of a figure: within ``size`` pixels, a palette of 32 colours."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    image.thumbnail(size)
    out = io.BytesIO()
    image.quantize(colors=32).save(out, format="PNG", optimize=True)
    return out.getvalue()


E = html.escape
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em 2em;color:#222;max-width:1500px}
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#555;margin:0 0 1em}.cards{display:flex;gap:1em;flex-wrap:wrap}
.card{flex:1 1 420px;border:1px solid #ccc;border-radius:6px;padding:.6em 1em;background:#fafafa}
.card h2{border:0;margin:.1em 0;font-size:1.05em}.big{font-size:1.6em;margin:.1em 0}
.card p{margin:.3em 0}.bar{display:flex;height:12px;border-radius:3px;overflow:hidden;margin:.4em 0;background:#eee}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:.3em 1.2em;font-size:12.5px}
.legend li::before{content:"";display:inline-block;width:.9em;height:.9em;border-radius:2px;margin-right:.35em;
vertical-align:-.1em;background:var(--swatch)}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}.num{text-align:right}small,.small{color:#555;font-size:11.5px}
.pill{display:inline-block;border-radius:9px;padding:0 7px;font-size:11.5px;white-space:nowrap;margin:1px 0}
.v-reproduced{background:#d4edda;color:#155724}.v-not-reproduced{background:#f8d7da;color:#721c24}.v-inconclusive{background:#ffe8cc;color:#7a4100}
.v-no-reference,.v-pending{background:#e2e3e5;color:#383d41}.v-unavailable{background:#f8d7da;color:#58151c}.v-smoke{background:#d1ecf1;color:#0c5460}
.v-not-run-here{background:#fff3cd;color:#856404}.model{background:#e8dff5;color:#4a2a7a}
tr.claim:target{outline:2px solid #4a90d9}details summary{cursor:pointer;color:#245;font-size:12px}
.glance{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}.glance>div:first-child{flex:1 1 440px}.glance>div+div{flex:0 1 760px;max-width:760px}
.glance img{max-width:100%;border:1px solid #eee}
.figs{display:flex;flex-wrap:wrap;gap:10px}.figs figure{margin:0;width:370px;border:1px solid #e3e3e3;padding:4px}
.figs img{max-width:100%;height:auto;display:block;margin:auto}.figs figcaption{font-size:12px}
.badge td:first-child{font-weight:bold;white-space:nowrap}ul{margin:.2em 0;padding-left:1.2em}
code{background:#f4f4f4;padding:0 3px;border-radius:3px}
.miss{display:inline-block;border-radius:3px;padding:0 4px;font-size:11.5px;margin:1px 0}
.m-implementation{background:#fde2c8;color:#7a3b00}.m-ceiling-below-target{background:#e8dff5;color:#4a2a7a}
.m-no-ceiling{background:#eee;color:#555}
"""


def _pill(verdict: str, kind: str, side: str) -> str:
    return (f'<span class="pill v-{E(verdict)}" data-side="{side}" data-verdict="{E(verdict)}">'
            f'{E(verdict_label(verdict, kind))}</span>')


def _card(card: Card) -> str:
    """One side's headline (``count`` of ``total``, one denominator), a bar of its parts with a legend
    naming each part's count, and the lines under it."""
    total = card.total or 1
    legend = card.legend()
    bar = "".join(f'<span style="width:{100 * n / total:.2f}%;background:{colour}" title="{n} {E(label)}"></span>'
                  for n, label, colour in legend if n)
    keys = "".join(f'<li style="--swatch:{colour}">{n} {E(label)}</li>' for n, label, colour in legend)
    return (f'<div class="card" id="verdicts-{card.side}"><h2>{E(card.title)}</h2>'
            f'<p class="big"><b>{card.count}</b> of {card.total} {E(card.what)}</p>'
            f'<div class="bar">{bar}</div><ul class="legend" id="legend-{card.side}">{keys}</ul>'
            + "".join(f'<p class="small">{E(line)}</p>' for line in card.lines) + "</div>")


def _record_link(ctx: Context, path: str, text: str, record_id: str) -> str:
    link = f'<a href="{E(ctx.rel(path))}" title="{E(path)} (record {E(record_id)})">{E(text)}</a>'
    return link + (f' <a class="small" href="#rec-{E(record_id)}">provenance</a>' if record_id else "")


def _side_cell(ctx: Context, r, side: str) -> str:
    verdict, kind = getattr(r, f"{side}_verdict"), r.kind
    value, record, record_id = fmt_value(getattr(r, f"{side}_value")), getattr(r, f"{side}_record"), getattr(r, f"{side}_run_id")
    parts = [_pill(verdict, kind, side)]
    if record:
        shown = value or ("no value" if verdict in ("reproduced", "not-reproduced", "inconclusive") else "record")
        parts.append("<br>" + _record_link(ctx, record, shown, record_id))
    if ceiling := ceiling_label(r, side):  # measured (above), ceiling, target: the row's three numbers
        parts.append(f'<br><small class="ceiling" data-side="{side}">{E(ceiling)} \u00b7 target {E(r.target)}</small>')
    if miss := miss_label(r, side):
        kind = getattr(r, f"{side}_miss")
        parts.append(f'<br><span class="miss m-{E(kind)}" data-side="{side}" data-miss="{E(kind)}">{E(miss)}</span>')
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
    figs = [e for e in r.experiments if any(figure_key(f) == e for f in ctx.figures)]
    if figs:
        items.append("<p><b>Figures</b>: " + ", ".join(f'<a href="#fig-{E(e.replace("/", "-"))}">{E(e)}</a>'
                                                        for e in figs) + "</p>")
    if page := paper_page(r.experiments):
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
    # the thumbnails on threads (Pillow decodes and encodes without the GIL): the report is the DAG's
    # last step, alone on the machine, and about 100 figures took 3 s on one core
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        thumbs = dict(zip(ctx.figures, pool.map(thumbnail, ctx.figures)))
    parts = []
    for paper in dict.fromkeys(f.parent.name for f in ctx.figures):
        figs = []
        for f in (f for f in ctx.figures if f.parent.name == paper):
            data = base64.b64encode(thumbs[f]).decode()
            pdf = f.with_suffix(".pdf")
            links = f'<a href="{E(ctx.rel(f))}">PNG</a>' + (f' \u00b7 <a href="{E(ctx.rel(pdf))}">PDF</a>'
                                                             if pdf.is_file() else "")
            figs.append(f'<figure id="fig-{E(paper)}-{E(f.stem)}"><a href="{E(ctx.rel(f))}" class="thumb">'
                        f'<img src="data:image/png;base64,{data}" alt="{E(paper)}/{E(f.stem)}" loading="lazy"></a>'
                        f'<figcaption><b>{E(f.stem)}</b> \u00b7 {links} \u00b7 <span class="small">'
                        f'{E(figure_source(ctx, f))}</span></figcaption></figure>')
        parts.append(f'<h3>{E(paper)}</h3><div class="figs">{"".join(figs)}</div>')
    return "".join(parts)


def _run_cell(ctx: Context, run: dict | None) -> str:
    if run is None:
        return "<td>-</td>"
    time, disk = cost(run)
    status = run["status"] + (f" ({run['reason']})" if run["reason"] else "")
    items = "".join(f"<tr><th>{E(k)}</th><td>{E(v)}</td></tr>" for k, v in provenance_items(run))
    mlflow = ctx.mlflow_link(run["record_id"])
    return (f'<td id="rec-{E(run["record_id"])}"><a href="{E(ctx.rel(run["path"]))}">{E(status)}, {E(run["scale"])}</a>'
            f' \u00b7 {E(run["started"][:10])} \u00b7 <code>{E((run["provenance"].get("commit") or "")[:7])}</code>'
            f' \u00b7 {E(time)} \u00b7 {E(disk)}<br><small>{E(provenance_line(run["provenance"]))}</small>'
            + (f' \u00b7 <a class="small" href="{E(mlflow)}">MLflow run</a>' if mlflow else "")
            + f'<details><summary>provenance</summary><table>{items}</table></details></td>')


def _tests_html(ctx: Context) -> str:
    t = ctx.tests
    if t is None:
        return "<p>No test results: <code>make test</code> writes the JUnit XML this section reads.</p>"
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
                   f'{_run_cell(ctx, r["here"])}</tr>' for r in runs_rows(ctx))
    return (f'<h3>ACM badges: the evidence in this run</h3><table class="badge" id="badges"><tr><th>badge</th>'
            f'<th>evidence</th><th>missing</th></tr>{badges}</table>'
            f'<h3>Commands</h3><table id="commands">{commands}</table>'
            + (f'<p id="screenshot">{E(ctx.screenshot)}</p>' if ctx.screenshot else "") +
            f'<h3>Tests</h3>{_tests_html(ctx)}'
            f'<h3>Each experiment: time, disk, provenance</h3><p class="small">Reference machine: '
            f'{E(totals(ctx.reference_runs))}. Here: {E(totals(ctx.here_runs))}. Time is the record\'s '
            f'duration_s (a sweep\'s with its points\'), disk its run folder.</p>'
            f'<table id="runs"><tr><th>experiment</th><th>reference machine</th><th>here</th></tr>{runs}</table>')


def to_html(ctx: Context, chart: bytes) -> str:
    df = ctx.df
    glance = per_paper(df)
    chart_img = base64.b64encode(chart).decode()
    commit = git_state()["commit"][:7]
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>repro claims report</title>
<style>{CSS}</style></head><body>
<h1>Claims report</h1>
<p class="sub">{len(df)} claims of {df.paper.nunique()} papers, each judged on the reference machines (the
committed paper-scale runs) and here (this machine's run). Built at commit <code>{E(commit)}</code>.</p>
<div class="cards" id="summary">{"".join(_card(card) for card in cards(ctx))}</div>
<h2 id="glance">At a glance</h2>
<div class="glance"><div>{_table(glance, "per-paper")}<p class="small">held: every condition of the claim
holds; missed: one does not; no committed run: no paper-scale run committed for it; smoke run: ran here at
the smoke scale (not judged against a paper-scale target); pending: not implemented yet; unavailable: cannot
run on the machines lent (the row gives the commands tried and their output).</p></div>
<div><img id="chart" src="data:image/png;base64,{chart_img}" alt="every claim against its target"
width="760"><p class="small">{E(claims_chart.CAPTION)}</p></div></div>
<h2 id="claims">Claims</h2>{_claims_table(ctx)}
<h2 id="figures">Figures</h2><p class="small">Thumbnails; each links to its full PNG and PDF.</p>{_figures_html(ctx)}
<h2 id="artifact">For an artifact committee</h2>{_artifact_html(ctx)}
</body></html>
"""
