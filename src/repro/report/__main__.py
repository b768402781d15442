"""`python -m repro.report`: the claims table (repro.report.claims) and the report's files
(repro.report.pages) in one command; the workflow's `report` rule runs it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from repro import layout, records
from repro.report import claims, pages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=claims.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ledger", type=Path, default=Path("config/claims"),
                    help="the claims files' folder (config/claims/<paper>.yaml), or one claims file")
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--reference", type=Path, default=Path("results/reference"))
    ap.add_argument("--config", type=Path, default=None,
                    help="config folder holding experiment/ (default: the repository's); a claim whose "
                         "experiment has no file there is pending")
    ap.add_argument("--figures", type=Path, nargs="*", default=None,
                    help="figure PNGs to show as thumbnails (default: results/figures/*/*.png, and the "
                         "reference's for experiments with none here)")
    ap.add_argument("--junit", type=Path, default=None,
                    help="the test suite's JUnit XML (default: <results>/tests/junit.xml, written by make test)")
    ap.add_argument("--screenshot", type=Path, default=None,
                    help="also write a PNG of the page as headless Chromium shows it (skipped, with the "
                         "reason, where Chromium is not installed)")
    ap.add_argument("--out", type=Path, default=Path("results/claims"))
    args = ap.parse_args(argv)
    try:
        df = claims.build(args.ledger, args.results, args.reference, args.config)
        figures = args.figures if args.figures is not None else pages.default_figures(args.results, args.reference)
        page = pages.write(df, args.out, figures, results=args.results, reference_root=args.reference,
                            junit=args.junit if args.junit is not None else args.results / "tests" / "junit.xml",
                            config_root=args.config, screenshot=args.screenshot)
    except (claims.LedgerError, layout.LayoutError, records.RecordError) as exc:
        print(f"repro.report: error: {exc}", file=sys.stderr)
        return 2
    for side in ("reference", "here"):
        print(f"{side}: " + ", ".join(f"{n} {v}" for v, n in claims.tally(df, side).items() if n))
    print(f"{page}: {page.stat().st_size / 1e6:.2f} MB")
    if args.screenshot is not None:
        print(f"screenshot: {args.screenshot}" if args.screenshot.is_file() else
              f"no screenshot: the page says why ({page})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
