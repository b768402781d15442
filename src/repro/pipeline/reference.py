"""Reference results: a GPU run's outputs committed under results/reference/<gpu-slug>/.

`python -m repro.pipeline.reference publish --from results --gpu nvidia-h200 [--only paper/experiment ...]`
(a sweep point's folder, e.g. clicktrain/clicktrain_budget/admm_e10, is published when --only names it)
`python -m repro.pipeline.reference status [--gpu nvidia-h200] [--stale]`: the published records, with their
commit, GPU sharing, and the code changed since each ran (what a GPU session would rerun).
`python -m repro.pipeline.reference judge <file> --since <commit> --reason "..." [--records KEY ...]`:
record in config/unmoved.yaml that the file's change since that commit computes no other number (a
message's text, a refactor behind the same results), so that its records stop counting as stale for
it; with --records, only for those records (a change that moves some records and not others, a file
added since the commit: ``was: absent``).

Publishing copies, exactly as the pipeline wrote them, each finished paper-scale run folder
(record, tables, Hydra config) of a machine with that GPU, its log, its figures and the run's
claims table. A published experiment replaces its earlier reference folder whole. Reports on machines
that cannot run a step fall back to these and say so. A CPU step that only combines records of that
GPU (a comparison such as clicktrain_compare) belongs to that GPU too: its inputs say so.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

from repro import layout, records
from repro.pipeline import provenance
from repro.machine import gpu_slug



def record_gpu(rec: dict, results: Path) -> str:
    """The GPU (slug) a record's numbers come from: its own, or, for a CPU step whose record inputs
    all come from one GPU, theirs (:func:`input_gpu_name`)."""
    own = gpu_slug(rec["provenance"].get("gpu_name"))
    if own != "cpu":
        return own
    return gpu_slug(records.input_gpu_name(rec, results))


def _nested(results: Path, only: list[str] | None) -> list[Path]:
    """Records of the run folders that `only` names below results/<paper>/<experiment> (a sweep's
    points, e.g. clicktrain/clicktrain_budget/admm_e10): published only when named."""
    found = []
    for key in only or []:
        path = Path(results) / key / records.RECORD_NAME
        if len(Path(key).parts) > 2 and path.exists():
            found.append(path)
    return found


def publish(results: Path, reference_root: Path, gpu: str, only: list[str] | None = None) -> list[str]:
    results, dest_root = Path(results), Path(reference_root) / gpu
    published = []
    for rec_path in records.find(results) + _nested(results, only):
        rec = records.read(rec_path)
        rel = rec_path.parent.relative_to(results).as_posix()  # paper/experiment, or a sweep point's folder
        key = f"{rec['paper']}/{rec['experiment']}"
        if only and rel not in only:
            continue
        if rec["status"] != "ok" or rec["scale"] != "paper":
            continue
        if record_gpu(rec, results) != gpu:
            continue
        dest = dest_root / rel
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(rec_path.parent, dest)
        log = results / "logs" / f"{rel}.log"
        if log.exists():
            (dest_root / "logs" / log.parent.relative_to(results / "logs")).mkdir(parents=True, exist_ok=True)
            shutil.copy2(log, dest_root / "logs" / f"{rel}.log")
        for fig in (results / "figures" / rec["paper"]).glob(f"{rec['experiment']}.*") if rel == key else []:
            (dest_root / "figures" / rec["paper"]).mkdir(parents=True, exist_ok=True)
            shutil.copy2(fig, dest_root / "figures" / rec["paper"] / fig.name)
        published.append(rel)
    if published and (results / "claims" / "claims.csv").exists():
        shutil.copytree(results / "claims", dest_root / "claims", dirs_exist_ok=True)
    return published


def status(reference_root: Path, gpu: str) -> list[dict]:
    """Every published record of ``gpu`` (sweep points too) with what a maintainer planning GPU time
    needs: its commit and date, whether it shared the GPU or was resumed, and what of the code that
    made it (or of its inputs') changed since it ran (the claims report's stale-code note)."""
    root = Path(reference_root) / gpu
    rows = []
    for path in sorted(root.rglob(records.RECORD_NAME)):
        rec = records.read(path)
        prov = rec.get("provenance", {})
        neighbours = records.gpu_neighbours(rec)
        rows.append(dict(record=path.parent.relative_to(root).as_posix(), commit=(prov.get("commit") or "")[:7],
                         started=(rec.get("started") or "")[:10], neighbours="" if neighbours is None else neighbours,
                         resumed=(rec.get("tags") or {}).get("resumed", "none") != "none",
                         stale=stale_code(rec, root)))
    return rows


def _code_paths(record: dict) -> list[str]:
    """For a record without ``provenance.code``: the files its experiment's entry module imports
    (transitively, figures and bookkeeping aside) and its experiment file; its paper's folder where
    the experiment file is gone."""
    experiment = f"{record['paper']}/{record['experiment']}"
    code = provenance.experiment_code(experiment)
    if code is None:
        return [f"src/repro/papers/{record['paper']}", f":(exclude)src/repro/papers/{record['paper']}/figures.py"]
    return [*code, *(provenance.repo_path(p) for p in layout.experiment_files(experiment))]


def _changed_code(record: dict, names=()) -> str:
    """'<commit>: <files>' of the code that made the record, changed since it ran ("" when none did or
    git cannot tell). A record that lists its code (``provenance.code``: every module it ran, kernel
    source and its experiment file, by digest) is checked file by file, comments, formatting and
    docstrings aside; an older one by the files its entry module imports and its experiment files
    (_code_paths), changed since its commit, comment-only lines aside. Either way a change that
    config/unmoved.yaml judges to move no number of a record answering to ``names``
    (provenance.judgment_names) does not count."""
    prov = record.get("provenance", {})
    commit = prov.get("commit", "")
    if prov.get("code"):
        changed = provenance.changed_code(prov["code"], commit, record.get("scale"), names)
    else:
        changed = provenance.changed_since_judged(commit, _code_paths(record), record.get("scale"), names) or []
    if not changed:
        return ""
    shown = ", ".join("/".join(Path(c).parts[-2:]) for c in changed[:4])  # comet/hooks.py, train/hooks.py
    shown += f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return f"{commit[:7]}: {shown}"


def stale_code(record: dict, results: Path | None = None) -> str:
    """For a reference record: what of the code that made it changed since it ran, and, for a CPU step
    (a comparison) whose inputs are records below ``results``, since each input ran; so that the
    report says the committed value predates the code that would make it now ("" when nothing did).
    ``results`` is the card's folder the records were read from: a record's folder below it is one of
    the names a scoped judgment may give it (provenance.judgment_names)."""
    notes = []
    if own := _changed_code(record, provenance.judgment_names(record, results)):
        notes.append(f"its code changed since that run ({own})")
    inputs = [] if results is None else records.input_records(record, results) or []
    stale = [f"{r['experiment']} ({c})" for r in inputs if (c := _changed_code(r, provenance.judgment_names(r, results)))]
    if stale:
        notes.append("the code of its inputs changed since they ran: " + "; ".join(stale))
    return ", and ".join(notes) + ": a rerun may change it" if notes else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pub = sub.add_parser("publish", help="copy finished paper-scale GPU runs into the reference folder")
    pub.add_argument("--from", dest="results", type=Path, default=Path("results"))
    pub.add_argument("--to", dest="reference", type=Path, default=Path("results/reference"))
    pub.add_argument("--gpu", default="nvidia-h200", help="GPU slug (lower-case name with dashes)")
    pub.add_argument("--only", nargs="*", help="paper/experiment keys, or sweep point folders below them, to publish (default: all experiments)")
    st = sub.add_parser("status", help="list the published records of a GPU: commit, sharing, and whether "
                                       "the code that made them changed since (what to rerun)")
    st.add_argument("--reference", type=Path, default=Path("results/reference"))
    st.add_argument("--gpu", default="nvidia-h200", help="GPU slug (lower-case name with dashes)")
    st.add_argument("--stale", action="store_true", help="only the records whose code changed since they ran")
    jd = sub.add_parser("judge", help="record in config/unmoved.yaml that a file's change since a commit "
                                      "moves no number (a message, a refactor), with the reason")
    jd.add_argument("file", help="repository path, e.g. src/repro/data/arrays.py")
    jd.add_argument("--since", required=True, help="the commit whose version of the file the judgment starts from")
    jd.add_argument("--reason", required=True, help="why the change computes the same numbers")
    jd.add_argument("--records", nargs="+", metavar="KEY",
                    help="the records the judgment is for (<paper>/<experiment>, which covers the sweep points "
                         "that ran it, or a record's folder below its card); without it, every record. "
                         "Required for a file that did not exist at --since")
    args = ap.parse_args(argv)
    try:
        return _command(args)
    except provenance.UnmovedError as exc:
        print(f"repro.pipeline.reference: {exc}", file=sys.stderr)
        return 2


def published_names(reference_root: Path | None = None) -> set[str]:
    """Every name a scoped judgment may give a published record (provenance.judgment_names) under
    ``reference_root`` (default results/reference of the repository), on any card."""
    root = Path(reference_root or provenance.REPO_ROOT / "results" / "reference")
    names: set[str] = set()
    for card in (p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        for path in card.rglob(records.RECORD_NAME):
            names |= provenance.judgment_names(records.read(path), card)
    return names


def judge(rel: str, since: str, reason: str, records: list[str] | None = None) -> dict:
    """Append a judgment to config/unmoved.yaml: ``rel`` as it is now computes what it did at ``since``
    (``was: absent`` where the file did not exist then), for every record, or for ``records`` alone
    (experiment keys or record folders that published records answer to; required for an added file)."""
    provenance.unmoved_judgments()  # the file as it is must parse before it grows
    path = provenance.REPO_ROOT / rel
    if not path.is_file():
        raise provenance.UnmovedError(f"{rel}: no such file in the repository")
    # present_digest, as the staleness check compares (a file only the layout move changed counts by
    # its pre-move text's digest): a judgment written with another digest would never match
    was, now = provenance.digest_then(since, rel), provenance.present_digest(rel)
    if was is None:
        raise provenance.UnmovedError(f"{rel}: git cannot give it at {since!r} (unknown commit, or a text that does not parse)")
    if was == provenance.ABSENT and not records:
        raise provenance.UnmovedError(f"{rel}: did not exist at {since}; an added file may be reached by some "
                                      "experiments and not others: name the records it cannot move with --records")
    if was == now:
        raise provenance.UnmovedError(f"{rel}: computes the same as at {since} already (same digest {now}); nothing to judge")
    if not reason.strip():
        raise provenance.UnmovedError("a judgment needs its reason")
    if records:
        published = published_names()
        unknown = [r for r in records if r not in published]
        if unknown:
            raise provenance.UnmovedError(f"--records {' '.join(unknown)}: no published record answers to "
                                          "(give <paper>/<experiment> or a record's folder below its card)")
    entry = dict(file=rel, was=was, now=now, since=since[:7], **({"records": list(records)} if records else {}),
                 reason=reason.strip())
    with open(provenance.unmoved_file(), "a") as fh:
        fh.write(yaml.safe_dump([entry], sort_keys=False, width=100))
    return entry


def _command(args) -> int:
    if args.cmd == "judge":
        entry = judge(args.file, args.since, args.reason, args.records)
        scope = f" for {', '.join(entry['records'])}" if entry.get("records") else ""
        print(f"judged: {entry['file']} {entry['was']} -> {entry['now']} (since {entry['since']}){scope}")
        return 0
    if args.cmd == "status":
        rows = status(args.reference, args.gpu)
        if not rows:
            print(f"repro.pipeline.reference: no records for {args.gpu} under {args.reference}", file=sys.stderr)
            return 1
        shown = [r for r in rows if r["stale"]] if args.stale else rows
        for r in shown:
            flags = (f" shared({r['neighbours']})" if r["neighbours"] else "") + (" resumed" if r["resumed"] else "")
            print(f"{r['record']:<60} {r['commit']} {r['started']}{flags}" + (f"\n    {r['stale']}" if r["stale"] else ""))
        print(f"{sum(bool(r['stale']) for r in rows)} of {len(rows)} records predate the code that would make "
              f"them now", file=sys.stderr)
        return 0
    done = publish(args.results, args.reference, args.gpu, args.only)
    if not done:
        print(f"repro.pipeline.reference: nothing to publish for {args.gpu} under {args.results}", file=sys.stderr)
        return 1
    print("published:", ", ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
