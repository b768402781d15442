"""The claims report in Markdown, for terminals and pull requests: the HTML page's sections
(repro.report.html_page) with links instead of thumbnails."""

from __future__ import annotations

import pandas as pd

from repro.report import chart as claims_chart
from repro.report.content import (COMMANDS, Context, cards, ceiling_label, cost, fmt_value, miss_label, per_paper,
                                  provenance_line, runs_rows, split_note, totals, verdict_label)


def _md(x) -> str:
    return str(x).replace("|", "/").replace("\n", " ")


def _md_table(frame: pd.DataFrame) -> list[str]:
    lines = ["| " + " | ".join(map(_md, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return lines + ["| " + " | ".join(map(_md, row)) + " |" for row in frame.itertuples(index=False)]


def _md_side(ctx: Context, r, side: str) -> str:
    verdict = verdict_label(getattr(r, f"{side}_verdict"), r.kind)
    value, record = fmt_value(getattr(r, f"{side}_value")), getattr(r, f"{side}_record")
    text = f"**{verdict}**" + (f" [{value or 'record'}]({ctx.rel(record)})" if record else "")
    if side == "reference" and r.reference_date:
        text += f" ({r.reference_date}, `{r.reference_commit}`)"
    text += "".join(f" \u00b7 {part}" for part in (ceiling_label(r, side), miss_label(r, side)) if part)
    if side == "here" and r.here_why:
        text += f" ({r.here_why})"
    return text


def to_markdown(ctx: Context) -> str:
    df = ctx.df
    summary = []
    for card in cards(ctx):
        summary += [f"**{card.title}: {card.headline}** ("
                    + ", ".join(f"{n} {label}" for n, label, _ in card.legend()) + ")", ""]
        summary += [f"- {line}" for line in card.lines] + [""]
    lines = ["# Claims report", "", f"{len(df)} claims of {df.paper.nunique()} papers.", "", *summary,
             "## At a glance", "", *_md_table(per_paper(df)), "",
             "![every claim against its target](claims_chart.png)", "", claims_chart.CAPTION, "", "## Claims", ""]
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
    if ctx.screenshot:
        lines += ["", ctx.screenshot]
    t = ctx.tests
    lines += ["", "### Tests", "", (f"{t.passed} passed, {t.failed} failed, {t.skipped} skipped of {t.tests} "
                                    f"({t.when} UTC, {t.seconds:.0f} s; {ctx.rel(t.path)})" if t else
                                    "No test results: `make test` writes the JUnit XML this section reads.")]
    if t:
        lines += [f"- failed: `{f}`" for f in t.failures[:20]] + \
                 [f"- skipped {n}x: {m}" for m, n in t.skip_reasons.most_common(6)]
    lines += ["", "### Each experiment: time, disk, provenance", "",
              f"Reference machine: {totals(ctx.reference_runs)}. Here: {totals(ctx.here_runs)}.", ""]
    rows = []
    for r in runs_rows(ctx):
        cells = {"experiment": r["experiment"]}
        for side in ("reference", "here"):
            run = r[side]
            if run is None:
                cells[side] = "-"
                continue
            time, disk = cost(run)
            cells[side] = (f"[{run['status']}, {run['scale']}]({ctx.rel(run['path'])}) {run['started'][:10]} "
                           f"`{(run['provenance'].get('commit') or '')[:7]}` {time} {disk}; "
                           f"{provenance_line(run['provenance'])}")
        rows.append(cells)
    lines += _md_table(pd.DataFrame(rows, columns=["experiment", "reference", "here"]))
    return "\n".join(lines) + "\n"
