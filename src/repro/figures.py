"""`python -m repro.figures <run_dir> <out.png>`: draw one experiment's figure (PNG + PDF).

The figure function is named in the experiment's config (`figure: package.module:function`) and
takes the run folder. When this machine skipped the experiment (e.g. no GPU), the figure is drawn
from the committed reference run instead and its title says so.
"""

from __future__ import annotations

import argparse
import json
import importlib
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from repro import layout, records  # noqa: E402
from repro.faults import kill_point  # noqa: E402
from repro.records import find_reference, input_gpu_name  # noqa: E402


def run_record(run_dir: Path) -> dict:
    """A run folder's record.json as a dict, unvalidated ({} when absent: figures then draw without
    titles), with its folder under ``_dir`` (so that a CPU step's subtitle can name its inputs' GPU)."""
    path = Path(run_dir) / "record.json"
    return dict(json.loads(path.read_text()), _dir=str(run_dir)) if path.is_file() else {}


def _hardware(record: dict) -> str:
    """The machine a figure's numbers come from: the record's GPU; for a CPU step over one GPU's
    records (a sweep's or comparison's summary), that GPU, said so."""
    gpu = record.get("provenance", {}).get("gpu_name")
    if gpu:
        return gpu
    try:
        name = record.get("_dir") and input_gpu_name(record, Path(record["_dir"]).parents[1])
    except (records.RecordError, OSError, ValueError):  # an unreadable input: say only what ran here
        name = None
    if name:
        return f"{name} (CPU step over its records)"
    return record.get("device", "")


def run_subtitle(record: dict, *extra_tags: str) -> str:
    """The line under every figure title: machine, scale, execution mode and data source, plus the
    record's tags named in ``extra_tags`` (e.g. how memory was measured)."""
    tags, shared = record.get("tags", {}), records.gpu_neighbours(record)
    parts = [_hardware(record), shared and f"GPU shared with up to {shared} other process(es)",
             record.get("scale") and f"{record['scale']} scale", tags.get("mode") and f"mode {tags['mode']}",
             *(tags.get(t) for t in extra_tags)]
    if "jpeg" in tags.get("data_source", "").lower():
        parts.append("CIFAR-10 JPEG copy (quality 75, 4:2:0 chroma)")
    return ", ".join(p for p in parts if p)


def open_run(run_dir) -> tuple[Path, dict]:
    """The opening every figure function shares: its run folder as a Path, and the record there
    (run_record: {} when absent)."""
    run_dir = Path(run_dir)
    return run_dir, run_record(run_dir)


def finish(fig, title: str, record: dict, *tags: str, fontsize: int = 10, below: str = "", footnote: str = ""):
    """The closing every figure function shares: ``title`` over the run's subtitle line (machine,
    scale, mode, data source and the record's ``tags`` named; run_subtitle), an optional line
    ``below`` it and a ``footnote`` at the bottom left, then a tight layout. Returns the figure."""
    fig.suptitle("\n".join(filter(None, [title, run_subtitle(record, *tags), below])), fontsize=fontsize)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, va="bottom")
        fig.tight_layout(rect=(0, 0.04 * (footnote.count("\n") + 1), 1, 1))
    else:
        fig.tight_layout()
    return fig


def _placeholder(text: str):
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig


def draw(run_dir: Path, out_png: Path, reference_root: Path | None = None) -> Path:
    record = records.read(run_dir)
    source_dir, note = Path(run_dir), None
    if record["status"] != "ok":
        ref = find_reference(reference_root, record["paper"], record["experiment"]) if reference_root else None
        if ref is None:
            fig = _placeholder(f"{record['paper']}/{record['experiment']}: {record['reason']}\n"
                               "and no committed reference run to show")
            return save(fig, out_png)
        source_dir = ref
        hardware = records.read(ref)["provenance"].get("gpu_name") or "reference machine"
        note = f"reference run on {hardware} ({record['reason']} here)"
    entry = record.get("figure")
    if not entry:
        raise ValueError(f"{run_dir}: the experiment config names no figure function")
    module, _, name = entry.partition(":")
    module = layout.current_module(module)  # a record made before the layout move names the former module
    fig = getattr(importlib.import_module(module), name)(source_dir)
    if note:
        fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="firebrick")
    return save(fig, out_png)


def save(fig, out_png: Path) -> Path:
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    # write to temp names first: a killed job leaves no half-written figure
    tmp_png, tmp_pdf = out_png.with_suffix(".tmp.png"), out_png.with_suffix(".tmp.pdf")
    fig.savefig(tmp_png, dpi=150, bbox_inches="tight")
    fig.savefig(tmp_pdf, bbox_inches="tight")
    plt.close(fig)
    kill_point("figure.temp_written")
    tmp_pdf.replace(out_png.with_suffix(".pdf"))
    tmp_png.replace(out_png)
    return out_png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="folder holding record.json and its tables")
    ap.add_argument("out", type=Path, help="output PNG path (a PDF is written beside it)")
    ap.add_argument("--reference", type=Path, default=Path("results/reference"),
                    help="reference results root, used when this machine skipped the run")
    args = ap.parse_args(argv)
    try:
        draw(args.run_dir, args.out, args.reference)
    except (records.RecordError, ValueError, FileNotFoundError) as exc:
        print(f"repro.figures: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
