"""README's per-experiment table, rendered from the committed reference records: no number in it is
typed by hand.

`python -m repro.report.readme` (`make readme`) renders the rows of docs/results-table.yaml (what each
row shows, as templates over record metrics; the file's head gives their syntax) from
results/reference/ and writes the table into README.md between the results-table markers;
`--check` writes nothing, prints a diff and exits 1 where README.md differs (tests/test_readme.py).

Each row shows the first card's values (the H200's: records.reference_slugs' order) and then, in the
same cell, those of every other card with its own runs of all the row's experiments, each card's
values from its own records only (a CPU step's, under cpu/, serve every card). The verdict column is
the row's claims' reference verdicts on each card (claims.card_sides, without the stale-code check).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from repro import layout, records
from repro.report import claims

START, END = "<!-- results-table:start -->", "<!-- results-table:end -->"
ROW_FIELDS = {"experiment", "claims", "label", "condition", "figure", "reads", "value", "target", "time", "cards"}
REQUIRED = {"experiment", "figure", "reads", "value", "target", "time"}
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# A number in a template's literal text: digits not part of a name (fp32, amb_0.5, VGG-16, top-1, e10).
TYPED_NUMBER = re.compile(r"(?<![\w.])(?<!\w-)-?\d+(?:\.\d+)?")
VERDICT_TEXT = {"reproduced": "reproduced", "not-reproduced": "not reproduced", "inconclusive": "inconclusive",
                "pending": "pending", "unavailable": "unavailable"}


class TableError(ValueError):
    """The row spec is malformed, or a record lacks what a row reads."""


@dataclass
class Row:
    spec: dict
    where: str

    @property
    def claims(self) -> list[str]:
        return list(self.spec.get("claims") or [])

    def template(self, name: str, card: str) -> str:
        return ((self.spec.get("cards") or {}).get(card) or {}).get(name, self.spec[name])


@dataclass
class Table:
    """The reference tree and ledger a rendering reads, with what it has read (records by path, the
    claims' sides by id)."""

    reference_root: Path
    ledger: dict[str, dict]
    config_root: Path | None = None
    _records: dict[Path, dict] = field(default_factory=dict)
    _sides: dict[str, dict] = field(default_factory=dict)
    _labels: dict[str, str] = field(default_factory=dict)

    @property
    def cards(self) -> list[str]:
        return [s for s in records.reference_slugs(self.reference_root) if s != "cpu"]

    def record(self, folder: Path) -> dict:
        if folder not in self._records:
            self._records[folder] = records.read(folder)
        return self._records[folder]

    def resolve(self, pattern: str, card: str) -> list[tuple[str, Path]]:
        """The experiments a reads pattern (<paper>/<name>, * allowed in the name) names on ``card``,
        with their run folders: the card's own, else cpu/'s."""
        paper, name = layout.split(pattern)
        for slug in (card, "cpu"):
            base = self.reference_root / slug / paper
            found = sorted(p.parent for p in base.glob(f"{name}/{records.RECORD_NAME}")) if "*" in name else (
                [base / name] if (base / name / records.RECORD_NAME).is_file() else [])
            if found:
                return [(f"{paper}/{p.relative_to(base).as_posix()}", p) for p in found]
        return []

    def sides(self, claim_id: str, where: str) -> dict:
        if claim_id not in self.ledger:
            raise TableError(f"{where}: no claim {claim_id!r} in the ledger")
        if claim_id not in self._sides:
            claim = self.ledger[claim_id]
            metric = claim.get("metric")
            if claim.get("unavailable") or metric is None or not layout.experiment_path(
                    metric["experiment"], self.config_root).is_file():
                # Judged nowhere, as the claims report says (claims.evaluate): unavailable (the
                # ledger's evidence) or pending (no metric, or no experiment to make it yet).
                verdict = "unavailable" if claim.get("unavailable") else "pending"
                self._sides[claim_id] = {card: claims.Side(verdict) for card in self.cards}
            else:
                # The committed CPU steps (cpu/) stand in for this machine's results: the table reads
                # nothing outside the reference tree.
                self._sides[claim_id] = claims.card_sides(claim, self.reference_root, self.reference_root / "cpu",
                                                          self.config_root, check_code=False)
        return self._sides[claim_id]

    def label(self, card: str) -> str:
        """A card's short name from the GPU its records name ("NVIDIA H100 80GB HBM3" -> "H100")."""
        if card not in self._labels:
            gpus = (self.record(p.parent)["provenance"].get("gpu_name")
                    for p in sorted((self.reference_root / card).rglob(records.RECORD_NAME)))
            gpu = next((g for g in gpus if g), None)
            self._labels[card] = gpu.replace("NVIDIA", "").split()[0] if gpu else card
        return self._labels[card]


def load_spec(path: Path) -> list[Row]:
    """The rows of a table spec (docs/results-table.yaml), each checked: known fields, a claim or a
    label, templates that read only the row's `reads` and type no number by hand."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise TableError(f"{path}: not valid YAML: {exc}") from None
    entries = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise TableError(f"{path}: expected a top-level 'rows:' list")
    rows = []
    for i, spec in enumerate(entries):
        where = f"{path}: row #{i + 1} ({spec.get('experiment', '?')})"
        if unknown := set(spec) - ROW_FIELDS:
            raise TableError(f"{where}: unknown field(s) {sorted(unknown)}")
        if missing := REQUIRED - set(spec):
            raise TableError(f"{where}: missing field(s) {sorted(missing)}")
        if not spec.get("claims") and not spec.get("label"):
            raise TableError(f"{where}: give its claims, or a label saying what it shows instead")
        if spec.get("condition") and len(spec.get("claims") or []) != 1:
            raise TableError(f"{where}: a condition belongs to one claim")
        templates = [spec["value"], spec["time"], spec["target"]]
        for card, over in (spec.get("cards") or {}).items():
            if not isinstance(over, dict) or set(over) - {"value", "time"}:
                raise TableError(f"{where}: cards.{card} may give a value and a time template only")
            templates += over.values()
        used = set()
        for text in templates:
            if m := TYPED_NUMBER.search(PLACEHOLDER.sub("", text)):
                raise TableError(f"{where}: a number typed by hand in {text!r} (at {m.group()!r}): take it "
                                 "from a record or the ledger through a {...} template")
            for source, *_ in (p.split(":") for p in PLACEHOLDER.findall(text)):
                if source != "claim":
                    paper, names = layout.split(source)
                    used |= {f"{paper}/{n}" for n in names.split("|")}
        reads = set(spec["reads"])
        if used - reads or reads - used:
            raise TableError(f"{where}: reads must list exactly the experiments its templates read "
                             f"(not listed: {sorted(used - reads)}; not read: {sorted(reads - used)})")
        rows.append(Row(spec, where))
    return rows


def _number(record: dict, key: str, row: Row, experiment: str, card: str) -> list[float]:
    """The values of one metric name (or * pattern, or duration_s, or params.<path>) in a record."""
    if key.startswith("params."):
        value = record["params"]
        for part in key.split(".")[1:]:
            value = value[int(part)] if isinstance(value, list) and part.isdigit() else (
                value.get(part) if isinstance(value, dict) else None)
        values = [value]
    elif "*" in key:
        values = [v for k, v in sorted(record["metrics"].items()) if fnmatch.fnmatchcase(k, key)]
    elif key == "duration_s":
        values = [record.get(key)]
    else:
        values = [record["metrics"].get(key)]
    if not values or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        raise TableError(f"{row.where}: the record of {experiment} on {card} "
                         f"({Path(record['_dir']) / records.RECORD_NAME}) has no metric {key!r}")
    return values


def _shown(values: list[float], fmt: str) -> str:
    """One value, or the range of several ("1.2-3.4"; "-0.3 to +0.5" where a sign is shown)."""
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return "no value"
    lo, hi = format(values[0], fmt), format(values[-1], fmt)
    if lo == hi:
        return lo
    return f"{lo} to {hi}" if lo[0] in "+-" or hi[0] in "+-" else f"{lo}-{hi}"


def _claim_target(table: Table, row: Row, claim_id: str, key: str, fmt: str) -> str:
    claim = table.ledger.get(claim_id)
    if claim is None:
        raise TableError(f"{row.where}: no claim {claim_id!r} in the ledger")
    conds = [{**claim["metric"], "target": claim["target"]}, *(claim.get("also") or [])] if claim.get("metric") else []
    if key == "target":  # the headline's target, whatever the headline reads (a metric or a table statistic)
        conds = conds[:1] or ([{"target": claim["target"]}] if claim.get("target") is not None else [])
    target = next((c["target"] for c in conds if key == "target" or c.get("key") == key), None)
    if target is None:
        raise TableError(f"{row.where}: claim {claim_id} has no condition on {key!r}")
    return format(target, fmt)


def render_template(table: Table, row: Row, text: str, card: str | None) -> str:
    """A template with each {...} replaced by its value on ``card``'s records (or the ledger's target)."""
    def one(match: re.Match) -> str:
        source, *rest = match.group(1).split(":")
        if source == "claim":
            if len(rest) not in (2, 3):
                raise TableError(f"{row.where}: {match.group()} is not {{claim:<id>:<metric>[:<format>]}}")
            fmt = rest[2] if len(rest) == 3 else "g"
            if rest[1] == "measured":  # the claim's headline value on the card (claims.card_sides)
                if card is None:
                    raise TableError(f"{row.where}: {match.group()} is a value on a card (value or time, not target)")
                value = table.sides(rest[0], row.where)[card].value
                return _shown([] if value is None else [float(value)], fmt)
            return _claim_target(table, row, *rest[:2], fmt)
        if len(rest) not in (1, 2) or card is None:
            raise TableError(f"{row.where}: {match.group()} is not {{<paper>/<experiment>:<metric>[:<format>]}}"
                             + (" (the target reads the ledger only)" if card is None else ""))
        paper, names = layout.split(source)
        values = []
        for name in names.split("|"):
            for experiment, folder in table.resolve(f"{paper}/{name}", card):
                for key in rest[0].split("|"):
                    values += _number(table.record(folder), key, row, experiment, card)
        return _shown(values, rest[1] if len(rest) == 2 else "g")
    return PLACEHOLDER.sub(one, text)


def _verdict(table: Table, row: Row, card: str) -> str:
    """The row's claims' reference verdicts on ``card``: one where they agree, else each by id."""
    texts = {}
    for claim_id in row.claims:
        side = table.sides(claim_id, row.where)[card]
        # no-reference: the card's runs lack the metric (no value), or it has none (not run)
        text = VERDICT_TEXT.get(side.verdict, "no value" if side.records else "not run")
        if key := row.spec.get("condition"):
            holds = next((h for c, _, h in side.conditions if c.get("key") == key), None)
            if holds is not None:
                text = f"{'met' if holds else 'missed'} (`{claim_id}`: {text})"
        texts[claim_id] = text
    if not texts:
        return "-"
    return texts[row.claims[0]] if len(set(texts.values())) == 1 else ", ".join(
        f"`{c}` {t}" for c, t in texts.items())


def _cells(table: Table, row: Row, card: str) -> tuple[str, str, str] | None:
    """The value, time and verdict of a row on one card; None where the card has none of the row's
    experiments among its own runs (a card other than the first is then left out of the row)."""
    found = {pattern: table.resolve(pattern, card) for pattern in row.spec["reads"]}
    own = any(folder.is_relative_to(table.reference_root / card) for runs in found.values() for _, folder in runs)
    if not own and card != table.cards[0]:
        return None
    if missing := [p for p, runs in found.items() if not runs]:
        return f"not run (no record of {', '.join(missing)})", "not run", _verdict(table, row, card)
    return (render_template(table, row, row.template("value", card), card),
            render_template(table, row, row.template("time", card), card), _verdict(table, row, card))


def render(table: Table, rows: list[Row]) -> str:
    """The markdown table: the first card's values, then each other card's after its short name."""
    if not table.cards:
        raise TableError(f"{table.reference_root}: no card's reference runs (<card>/<paper>/<experiment>/record.json)")
    first, *others = table.cards
    for row in rows:
        if unknown := set(row.spec.get("cards") or {}) - set(table.cards):
            raise TableError(f"{row.where}: no card {', '.join(sorted(unknown))} under {table.reference_root} "
                             f"(its cards: {', '.join(table.cards)})")
    name = table.label(first)
    lines = [f"| experiment | claim | command: `snakemake --cores all <file>` | {name} value (paper scale) | target "
             f"| verdict | {name} time |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        value, time, verdict = _cells(table, row, first)
        for card in others:
            if (cells := _cells(table, row, card)) is not None:
                label = table.label(card)
                value += f". {label}: {cells[0]}"
                time += f"; {label}: {cells[1]}"
                verdict += f"; {label}: {cells[2]}" if cells[2] != "-" else ""
        claim = ", ".join(f"`{c}`" for c in row.claims)
        claim = f"{claim} {row.spec['label']}" if claim and row.spec.get("label") else claim or row.spec["label"]
        target = render_template(table, row, row.spec["target"], None)
        lines.append(f"| {row.spec['experiment']} | {claim} | `{row.spec['figure']}` | {value} | {target} "
                     f"| {verdict} | {time} |")
    return "\n".join(lines) + "\n"


def splice(readme: str, table_text: str, where: str = "README.md") -> str:
    """README's text with the table between its markers replaced by ``table_text``."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise TableError(f"{where}: needs one {START} line and, after it, one {END} line around the table")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table_text}{END}{tail}"


def changed_rows(current: str, wanted: str) -> list[str]:
    """The first cell (the experiment) of each row of ``wanted``'s table that ``current`` lacks."""
    old = set(current.splitlines())
    table = wanted.split(START)[1].split(END)[0]
    return [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("|") and line not in old]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; print a diff and exit 1 where README.md differs")
    ap.add_argument("--readme", type=Path, default=Path("README.md"))
    ap.add_argument("--spec", type=Path, default=Path("docs/results-table.yaml"))
    ap.add_argument("--reference", type=Path, default=Path("results/reference"))
    ap.add_argument("--ledger", type=Path, default=Path("config/claims"))
    ap.add_argument("--config", type=Path, default=None,
                    help="config folder holding experiment/ (default: the repository's)")
    args = ap.parse_args(argv)
    try:
        ledger = {c["id"]: c for c in claims.load_ledger(args.ledger)}
        table = Table(args.reference, ledger, args.config)
        current = args.readme.read_text()
        wanted = splice(current, render(table, load_spec(args.spec)), str(args.readme))
    except (TableError, claims.LedgerError, layout.LayoutError, records.RecordError) as exc:
        print(f"repro.report.readme: error: {exc}", file=sys.stderr)
        return 2
    if wanted == current:
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                   f"{args.readme} (committed)", f"{args.readme} (from the records)"))
        rows = changed_rows(current, wanted)
        print(f"repro.report.readme: {args.readme} differs from its records' table"
              + (f" in {'; '.join(rows)}" if rows else "") + ": run `make readme`", file=sys.stderr)
        return 1
    records.atomic_write_text(args.readme, wanted)
    print(f"{args.readme}: table rewritten from {args.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
