"""Where a number came from: the code that computed it (git commit, and a digest of every source
file it ran) and its config; the machine it ran on comes from :mod:`repro.machine`."""

from __future__ import annotations

import ast
import atexit
import copy
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import yaml

from repro import layout, machine

REPO_ROOT = layout.REPO_ROOT


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict:
    """Commit and dirty flag. REPRO_GIT_COMMIT / REPRO_GIT_DIRTY, when set, win: a tree copied to
    another machine may travel without .git, or with a stale one (a lent GPU machine once reported
    the session's first commit for every run), so the caller who made the copy says what it is."""
    if os.environ.get("REPRO_GIT_COMMIT"):
        return {"commit": os.environ["REPRO_GIT_COMMIT"],
                "dirty": {"0": False, "1": True}.get(os.environ.get("REPRO_GIT_DIRTY", ""))}
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": "unknown", "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def changed_since(commit: str, paths: list[str]) -> list[str] | None:
    """Which of ``paths`` (files or folders, relative to the repository) differ between ``commit`` and
    the working tree: so that a report can say a committed result predates the code that would make
    it now. None when that cannot be told (no git, or a commit this clone does not have)."""
    if not commit or commit == "unknown":
        return None
    magic = any(c in p for p in paths for c in "*?[:!\\")  # a pathspec's magic: git picks the files
    changed = _changed_files(str(REPO_ROOT), commit, tuple(paths) if magic else ())
    if changed is None or magic:
        return None if changed is None else list(changed)
    wanted = {p.rstrip("/") for p in paths}
    return [f for f in changed if _under(f, wanted)]


def _under(path: str, wanted: set[str]) -> bool:
    """Whether ``path`` is one of ``wanted`` or lies in a folder of them: its own name and each of its
    folders looked up once (the claims report asks this of every file changed since a record's commit,
    thousands, against that record's few hundred paths)."""
    if path in wanted:
        return True
    cut = path.find("/")
    while cut != -1:
        if path[:cut] in wanted:
            return True
        cut = path.find("/", cut + 1)
    return False


@lru_cache(maxsize=256)
def _changed_files(repo: str, commit: str, pathspec: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The files that differ between ``commit`` and the working tree (under ``pathspec``; all of them
    without one), comment-only lines aside (renames as the two paths they touch), asked of git once
    per commit and process: the claims report asks for about 200 records' files against some 20
    commits. (Kept for the process: the report's processes do not change the tree they read.)"""
    if not _has_commit(repo, commit):
        return None
    out = _git("diff", "--name-only", "--no-renames", "-I", r"^\s*#", commit, *(["--", *pathspec] if pathspec else []))
    return None if out is None else tuple(line for line in out.splitlines() if line)


# ---- which code made a record -------------------------------------------------------------------
PACKAGE_ROOT = layout.PACKAGE_ROOT  # src/repro


def _syntax(text: str) -> ast.Module:
    """A Python source's syntax tree without its docstrings (they compute nothing)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


# The last commit before the layout move (papers under repro.papers, the drivers under repro.pipeline,
# the report under repro.report; layout.MOVED): a file that differs from its former self at this
# commit only by the move computes what it did, so records and judgments made before still match it.
LAYOUT_MOVE_BASE = "208b4c37d9821b5701a992c4d5375a395c10ca0e"
_MODULE_NAME = re.compile(r"\brepro(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


class _Former(ast.NodeTransformer):
    """A syntax tree as it would read with every module under its former name (layout.former_module):
    each block's imports become one sorted list of (former full name, local name), and module names
    inside strings (entry points, ``-m`` commands) take their former names."""

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in block):
                continue
            names = sorted(_imported(n) for n in block if isinstance(n, (ast.Import, ast.ImportFrom)))
            rest = [n for n in block if not isinstance(n, (ast.Import, ast.ImportFrom))]
            setattr(node, field, [ast.Expr(ast.Constant("imports " + "; ".join(x for n in names for x in n)))] + rest)
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str) and "repro." in node.value:
            node.value = _MODULE_NAME.sub(lambda m: layout.former_module(m.group(0)), node.value)
        return node


def _imported(node) -> list[str]:
    if isinstance(node, ast.Import):
        return [f"{layout.former_module(a.name)} as {a.asname or a.name}" for a in node.names]
    if node.level:  # relative: kept as written (a package's own modules move with it)
        return [f"{'.' * node.level}{node.module or ''}:{a.name} as {a.asname or a.name}" for a in node.names]
    return [f"{layout.former_module(f'{node.module}.{a.name}')} as {a.asname or a.name}" for a in node.names]


def _former_syntax(text: str) -> ast.Module:
    """_syntax of ``text`` as it would read before the layout move (_Former)."""
    return ast.fix_missing_locations(_Former().visit(_syntax(text)))


# The syntax-tree work below is a pure function of a source's text, and the claims report asks it of
# the same few hundred texts (the present files, the files at a handful of commits) thousands of
# times: each text is parsed once per process (lru_cache), and its results are kept between
# processes (the syntax cache), so a report, a rerun or a test after the first parses nothing new.
def syntax_cache_path() -> Path:
    """Where the syntax work on the package's sources is kept between processes: ``syntax.json``
    beside the import cache (import_cache_path; outside results/, deleting it costs one re-parse).
    Entries are by the SHA-256 of a source's text, under the Python minor version that made them
    (ast.dump differs between versions)."""
    return import_cache_path().with_name("syntax.json")


_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
_SYNTAX_CACHE_MAX = 20_000  # entries; a larger file is started afresh


@lru_cache(maxsize=1)
def _syntax_cache() -> dict:
    try:
        data = json.loads(syntax_cache_path().read_text())
        entries = data["entries"] if data.get("python") == _PYTHON and isinstance(data.get("entries"), dict) else {}
    except (OSError, ValueError, AttributeError, KeyError):
        entries = {}
    if len(entries) > _SYNTAX_CACHE_MAX:
        entries = {}
    return {"entries": entries, "dirty": False, "saving": False}


def _save_syntax_cache() -> None:
    cache = _syntax_cache()
    if not cache["dirty"]:
        return
    from repro.atomic import atomic_write

    blob = json.dumps({"python": _PYTHON, "entries": cache["entries"]}, sort_keys=True).encode()
    try:
        atomic_write(syntax_cache_path(), lambda fh: fh.write(blob))
        cache["dirty"] = False
    except OSError:  # a read-only tree: the results are still right, just not kept
        pass


def _kept(kind: str, text: str, compute):
    """``compute(text)``, kept in the syntax cache under the text's SHA-256 and ``kind`` (written
    when the process exits). A text that does not parse raises, as ``compute`` does, and is not kept."""
    cache = _syntax_cache()
    entry = cache["entries"].get(key := hashlib.sha256(text.encode()).hexdigest(), {})
    if kind not in entry:
        entry = cache["entries"][key] = {**entry, kind: compute(text)}
        cache["dirty"] = True
        if not cache["saving"]:
            atexit.register(_save_syntax_cache)
            cache["saving"] = True
    return entry[kind]


@lru_cache(maxsize=4096)
def _former_key(text: str) -> str:
    """A digest of ``text``'s syntax tree as it would read before the layout move (_former_syntax)."""
    return _kept("former", text, lambda t: hashlib.sha256(
        ast.dump(_former_syntax(t), annotate_fields=False).encode()).hexdigest())


def same_but_moved(old: str, new: str) -> bool:
    """Whether two Python sources differ only by the layout move (imports and module names)."""
    try:
        return _former_key(old) == _former_key(new)
    except (SyntaxError, ValueError):
        return False


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_digest(path: Path) -> str:
    """A digest of what a source file computes: for Python its syntax tree without docstrings (so
    comments, formatting and docstrings change nothing), for other sources (CUDA kernels, configs)
    its lines without blank and comment-only ones ("#" or "//")."""
    return text_digest(Path(path).read_text(), Path(path).suffix)


@lru_cache(maxsize=4096)
def text_digest(text: str, suffix: str) -> str:
    """source_digest of a file's ``text`` whose name ends in ``suffix`` (e.g. the file at a commit)."""
    if suffix == ".py":
        return _kept("digest", text, lambda t: _digest(ast.dump(_syntax(t), annotate_fields=False)))
    return _digest("\n".join(line.rstrip() for line in text.splitlines()
                             if line.strip() and not line.lstrip().startswith(("#", "//"))))


def definitions(text: str) -> dict[str, str]:
    """The top-level definitions of a Python source by name -> digest (functions, classes, and the
    names module-level statements assign; docstrings, comments and formatting aside). Imports compute
    nothing and are left out; any other top-level statement counts under ``<module>``."""
    return dict(_definitions(text))


@lru_cache(maxsize=4096)
def _definitions(text: str) -> dict[str, str]:
    return _kept("defs", text, _compute_definitions)


def _compute_definitions(text: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for node in _former_syntax(text).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and str(node.value.value).startswith("imports ")):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)] or ["<module>"]
        else:
            names = ["<module>"]
        for name in names:
            found.setdefault(name, []).append(ast.dump(node, annotate_fields=False))
    return {name: _digest("\n".join(dumps)) for name, dumps in found.items()}


@lru_cache(maxsize=1)
def definition_index() -> dict[str, frozenset[str]]:
    """Every top-level definition in the package now: name -> the digests it has in some module."""
    index: dict[str, set[str]] = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        try:
            defs = definitions(path.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for name, digest in defs.items():
            index.setdefault(name, set()).add(digest)
    return {name: frozenset(digests) for name, digests in index.items()}


def _at_commit(commit: str, rel: str) -> str | None:
    """A file's text at ``commit`` (None where git cannot give it); for a file the layout move put
    elsewhere, its text under the path it had then."""
    if not commit or commit == "unknown":
        return None
    text = _show(commit, rel)
    if text is None and (former := layout.former_path(rel)) != rel:
        text = _show(commit, former)
    return text


_FULL_HASH = re.compile(r"[0-9a-f]{40}")


def _show(commit: str, rel: str) -> str | None:
    """``git show <commit>:<rel>``; kept per process for a full commit hash (what it names never changes)."""
    return _show_fixed(str(REPO_ROOT), commit, rel) if _FULL_HASH.fullmatch(commit) else _BLOBS.show(commit, rel)


@lru_cache(maxsize=4096)
def _show_fixed(repo: str, commit: str, rel: str) -> str | None:
    # a commit git lacks (or no git: a copied tree, as the tests' smoke DAG and fault slices run in)
    # has no files to show: said once per commit, where each file would cost a failed batch reader
    # and a failed `git show` (about 800 processes, 1.5 s, in a claims report of a copied tree)
    if not _has_commit(repo, commit):
        return None
    return _BLOBS.show(commit, rel)


class _BlobReader:
    """Files' text at commits, as ``git show <commit>:<path>`` gives it (``_git``: decoded, universal
    newlines, stripped), through one ``git cat-file --batch`` process per process: a subprocess per
    file cost the claims report about 5 s of its 7.5 (1,400 files). A process forked from the owner
    (the warm runner forks its jobs) starts its own reader and leaves the inherited pipes to the
    owner. Anything the batch cannot answer (not a file, a path with a newline, a broken pipe) falls
    back to ``git show``."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.repo: str | None = None
        atexit.register(self.close)

    def _reader(self) -> subprocess.Popen | None:
        if self.pid != os.getpid() or self.repo != str(REPO_ROOT):  # (tests point REPO_ROOT elsewhere)
            self.close()  # a reader inherited by a fork is the parent's: only its copy of the pipes goes
            self.pid, self.repo = os.getpid(), str(REPO_ROOT)
            try:
                self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except OSError:
                self.proc = None
        return self.proc

    def show(self, commit: str, rel: str) -> str | None:
        proc = None if "\n" in commit + rel else self._reader()
        if proc is None:
            return _git("show", f"{commit}:{rel}")
        try:
            proc.stdin.write(f"{commit}:{rel}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3:  # "<name> missing" (or ambiguous): git show fails too
                if not header:
                    raise OSError("git cat-file --batch ended")
                return None
            data = proc.stdout.read(int(header[2]) + 1)[:-1]
        except (OSError, ValueError):
            self.close()
            self.pid = None  # a new reader at the next call
            return _git("show", f"{commit}:{rel}")
        if header[1] != b"blob":  # a folder or a commit: git show's listing
            return _git("show", f"{commit}:{rel}")
        return data.decode().replace("\r\n", "\n").replace("\r", "\n").strip()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if self.pid != os.getpid():  # the parent's process: not this one's to end or wait for
            proc.returncode = 0  # (so that dropping this copy warns of no running child)
            for fh in (proc.stdin, proc.stdout):
                try:
                    fh.close()
                except OSError:
                    pass
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.SubprocessError):
            proc.kill()
            proc.wait()
        proc.stdout.close()


_BLOBS = _BlobReader()


def present_digest(rel: str) -> str | None:
    """source_digest of the file a record names as ``rel`` (at its present path, layout.current_path),
    None where it is gone; for a file that differs from its text at LAYOUT_MOVE_BASE only by the move,
    the digest of that text, so that the move alone changes nothing a record or a judgment compares."""
    path = REPO_ROOT / layout.current_path(rel)
    try:
        text = path.read_text()
        now = text_digest(text, path.suffix)
    except (OSError, SyntaxError, ValueError):
        return None
    if path.suffix == ".py":
        before = _before_move(str(REPO_ROOT), rel)
        if before is not None and before != text and same_but_moved(before, text):
            return text_digest(before, ".py")
    return now


@lru_cache(maxsize=None)
def _before_move(repo: str, rel: str) -> str | None:
    """``rel``'s text at LAYOUT_MOVE_BASE (under its former path), once per repository and file."""
    return _at_commit(LAYOUT_MOVE_BASE, rel)


def _experiment_at(commit: str, rel: str) -> dict | None:
    """An experiment file at ``commit``, its base merged under it (layout's rule), or None."""
    text = _at_commit(commit, rel)
    if text is None:
        return None
    data = copy.deepcopy(_yaml(text)) or {}
    bases = [d for d in data.pop("defaults", None) or [] if d != "_self_"]
    merged: dict = {}
    for base in bases:
        name = base.rsplit("/", 1)[-1]
        parent = _experiment_at(commit, f"{Path(rel).parent.as_posix()}/{name}.yaml")
        if parent is None:
            return None
        merged = layout._merge(merged, parent)
    return layout._merge(merged, data)


def computes_the_same(rel: str, commit: str, scale: str | None = None) -> bool:
    """Whether a file that changed since ``commit`` still computes what it did then: for Python, every
    top-level definition it had is in the package now, unchanged, in some module (code moved between
    files, imports changed); for an experiment file, the same entry function and parameters at both
    scales, or at ``scale`` alone when given (a paper-scale record reads no ``smoke`` section; a
    variant rewritten over a base file, keys that compute nothing added). False where that cannot be
    told."""
    if rel.endswith(".py"):
        old = _at_commit(commit, rel)
        if old is None:
            return _split_off(rel, commit)
        try:
            defs = _definitions(old)
        except SyntaxError:
            return False
        index = definition_index()
        return all(digest in index.get(name, ()) for name, digest in defs.items())
    if rel.startswith("config/experiment/") and rel.endswith(".yaml"):
        experiment = Path(rel).relative_to("config/experiment").with_suffix("").as_posix()
        if layout.is_abstract(experiment):
            return _base_computes_the_same(rel, experiment, commit, scale)
        old = _experiment_at(commit, rel)
        try:
            now = layout.experiment_file(experiment)
        except layout.LayoutError:
            return False
        if old is None:
            return False
        keys = ("params",) if scale == "paper" else ("params", "smoke")
        return (str(old.get("entry", "")).rpartition(":")[2] == str(now.get("entry", "")).rpartition(":")[2]
                and all(old.get(k) == now.get(k) for k in keys))
    return False


def _base_computes_the_same(rel: str, base: str, commit: str, scale: str | None = None) -> bool:
    """Whether an abstract base (layout.is_abstract) changed since ``commit`` (or made since, from keys its
    variants held) computes what it did: it runs nothing itself, so through the experiments built on it.
    One whose own file changed since is judged whole by itself (computes_the_same merges its bases);
    every other one must compute the same as then."""
    paper = layout.split(base)[0]
    built_on = []
    for name in layout.experiments_of(paper):
        try:
            files = layout.experiment_files(f"{paper}/{name}")
        except layout.LayoutError:
            return False
        if rel in (repo_path(f) for f in files[1:]):
            built_on.append(f"config/experiment/{paper}/{name}.yaml")
    return bool(built_on) and all(computes_the_same(v, commit, scale) for v in built_on
                                  if not changed_since(commit, [v]))


@lru_cache(maxsize=4096)
def _yaml(text: str):
    """A YAML text parsed, once per process (callers copy before changing it)."""
    return yaml.safe_load(text)


def _split_off(rel: str, commit: str) -> bool:
    """Whether a Python file that did not exist at ``commit`` holds only definitions that its package
    folder had then, unchanged (a module split off another, e.g. superneurons' plan from its runtime),
    or none at all (a new package's __init__.py)."""
    path = REPO_ROOT / layout.current_path(rel)
    try:
        text = path.read_text()
    except OSError:
        return False
    return _split_off_text(str(REPO_ROOT), rel, commit, text)


@lru_cache(maxsize=4096)
def _split_off_text(repo: str, rel: str, commit: str, text: str) -> bool:
    """_split_off of ``rel`` whose present text is ``text``, in repository ``repo``."""
    folder = Path(layout.former_path(layout.current_path(rel))).parent.as_posix()
    try:
        now = _definitions(text)
        if all(isinstance(node, ast.Pass) for node in _syntax(text).body):
            return True  # a docstring alone (a new package's __init__.py) computes nothing
    except (SyntaxError, ValueError):
        return False
    listing = _git("ls-tree", "--name-only", commit, f"{folder}/") if commit and commit != "unknown" else None
    if not listing:
        return False
    then: dict[str, set[str]] = {}
    for name in listing.splitlines():
        if name.endswith(".py") and (text := _show(commit, name)) is not None:
            try:
                for key, digest in _definitions(text).items():
                    then.setdefault(key, set()).add(digest)
            except SyntaxError:
                continue
    return all(digest in then.get(key, ()) for key, digest in now.items())


# modules that run, record and report but compute no number of a record: the spine's bookkeeping
# modules, and the kernel loader and builder, the pipeline's drivers and the report (whole packages).
# The kernel sources are recorded themselves, and each cubin's <stem>.json its flags; faults kills a
# process at a named point only when a test asks.
BOOKKEEPING = {"__init__", "atomic", "experiment", "faults", "figures", "layout", "machine", "progress", "records",
               "sweep"}
BOOKKEEPING_PACKAGES = {"kernels", "pipeline", "report"}
# their former top-level names (layout.MOVED), as records made before the move list them
_FORMER_BOOKKEEPING = {"artifact", "browser", "build_kernels", "claims", "claims_chart", "gpu_slots", "kernels",
                       "provenance", "reference", "report", "report_content", "report_html", "report_markdown", "run",
                       "scale", "tracking", "watchdog"}


def _module_file(name: str) -> Path | None:
    """The source file of repro module ``name`` in this tree (a package's __init__.py), or None."""
    base = PACKAGE_ROOT.joinpath(*name.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def import_closure(module: str) -> list[str]:
    """``module`` and every repro module it imports, transitively, read from the sources (nothing is
    imported): what a record made by an entry in ``module`` ran, for records that predate
    ``provenance.code``. Parent packages count (importing a module runs their __init__)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or not (name == "repro" or name.startswith("repro.")):
            continue
        path = _module_file(name)
        if path is None:  # a name imported from a module, not a module
            continue
        seen.add(name)
        todo += [name.rsplit(".", 1)[0]] if "." in name else []
        todo += _imported_names(path, name)
    _save_import_cache()
    return sorted(seen)


def import_cache_path() -> Path:
    """Where the import lists of the package's sources are kept between processes:
    ``$REPRO_CODE_CACHE``, default ``.cache/imports.json`` in the repository (outside results/, so
    `make clean-results` keeps it; deleting it only costs one re-parse)."""
    return Path(os.environ.get("REPRO_CODE_CACHE") or REPO_ROOT / ".cache" / "imports.json")


@lru_cache(maxsize=1)
def _import_cache() -> dict:
    """{"<module>:<sha256 of the file's bytes>": [imported names]}, loaded once per process; a
    missing or unreadable cache is an empty one."""
    try:
        data = json.loads(import_cache_path().read_text())
    except (OSError, ValueError):
        return {"entries": {}, "dirty": False}
    entries = data if isinstance(data, dict) else {}
    return {"entries": {k: v for k, v in entries.items() if isinstance(v, list)}, "dirty": False}


def _save_import_cache() -> None:
    cache = _import_cache()
    if not cache["dirty"]:
        return
    from repro.atomic import atomic_write  # (light; imported here so provenance's import stays as it was)

    blob = json.dumps(cache["entries"], sort_keys=True).encode()
    try:
        atomic_write(import_cache_path(), lambda fh: fh.write(blob))
        cache["dirty"] = False
    except OSError:  # a read-only tree: the closure is still right, just not kept
        pass


def _imported_names(path: Path, name: str) -> list[str]:
    """The names module ``name`` (source ``path``) imports, absolute. Keyed by the module and a digest
    of the file's bytes: each version of a file is parsed once, however many entries' closures it is
    in and however many Snakemake starts read it (common.smk computes every rule's code inputs)."""
    data = path.read_bytes()
    key = f"{name}:{hashlib.sha256(data).hexdigest()}"
    cache = _import_cache()
    if key in cache["entries"]:
        return list(cache["entries"][key])
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(data)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                root = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{root}.{base}" if base else root
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]  # a name may be a submodule
    cache["entries"][key] = found
    cache["dirty"] = True
    return list(found)


def _bookkeeping(rel: str) -> bool:
    """A repository path that code_files leaves out now: a top-level bookkeeping module or a figure module."""
    parts = Path(rel).parts
    if parts[:2] != ("src", "repro") or len(parts) < 3:
        return False
    return (Path(rel).name == "figures.py" or parts[2] in BOOKKEEPING_PACKAGES
            or (len(parts) == 3 and Path(parts[2]).stem in BOOKKEEPING | _FORMER_BOOKKEEPING))


def code_files(module_names, extra: tuple[Path, ...] = ()) -> list[Path]:
    """The package's source files behind ``module_names`` (e.g. sys.modules after a run, or an
    import_closure): every repro module's file except the figure modules (drawing changes no number)
    and the bookkeeping ones (BOOKKEEPING, BOOKKEEPING_PACKAGES), the kernel sources of each paper
    package among them (``papers/<paper>/kernels/``), and the ``extra`` files that exist."""
    files, papers = set(), set()
    for name in module_names:
        if name != "repro" and not name.startswith("repro."):
            continue
        path = Path(getattr(sys.modules.get(name), "__file__", None) or _module_file(name) or "")
        if path.suffix != ".py" or not path.is_relative_to(PACKAGE_ROOT) or path.name == "figures.py":
            continue
        parts = path.relative_to(PACKAGE_ROOT).parts
        if (len(parts) == 1 and path.stem in BOOKKEEPING) or parts[0] in BOOKKEEPING_PACKAGES:
            continue
        files.add(path)
        if len(parts) > 2 and parts[0] == "papers":
            papers.add(parts[1])
    for paper in papers:
        files.update(p for p in (PACKAGE_ROOT / "papers" / paper / "kernels").glob("*") if p.is_file())
    return sorted(files | {Path(p).resolve() for p in extra if Path(p).is_file()})


def repo_path(path: Path) -> str:
    path = Path(path).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


@lru_cache(maxsize=None)
def module_code(module: str) -> tuple[str, ...]:
    """The repository paths of the source files behind entry module ``module``: its import closure
    through code_files (what a run of it would list as provenance.code, its experiment file aside).
    The workflow makes them a step's inputs; the claims report checks old records against them."""
    return tuple(repo_path(f) for f in code_files(import_closure(module)))


def experiment_code(experiment: str) -> list[str] | None:
    """module_code of experiment '<paper>/<name>''s entry module (its experiment file, or the base
    file it builds on, names the entry), or None where the file or its entry is gone. The workflow's
    code inputs of a step."""
    try:
        entry = layout.experiment_file(experiment).get("entry")
    except layout.LayoutError:
        return None
    return list(module_code(entry.split(":")[0])) if entry else None


def code_digests(files) -> dict[str, str]:
    """{path (relative to the repository where it lies inside): source_digest}: what a record's code
    was, file by file."""
    return {repo_path(f): source_digest(f) for f in files}


def changed_code(digests: dict[str, str], commit: str = "", scale: str | None = None,
                 record_names=()) -> list[str]:
    """Which of a record's code files compute something else now (or are gone), by their digests;
    with the record's ``commit``, a file whose every definition moved unchanged (or an experiment file
    that runs the same at the record's ``scale``) does not count (computes_the_same), nor a change that
    config/unmoved.yaml judges to move no number of this record (judged_unmoved: its unscoped
    judgments, and those whose ``records`` hold one of ``record_names``, judgment_names). Files are found
    at their present paths (present_digest: the layout move alone changes none)."""
    changed = []
    for rel, digest in digests.items():
        if _bookkeeping(rel):  # recorded before it was counted as bookkeeping: it computes no number
            continue
        now = present_digest(rel)
        if now == digest or (commit and computes_the_same(rel, commit, scale)):
            continue
        # the digest at the commit, made here (ast.dump differs between Pythons), else the record's own;
        # a file the commit lacks (a run from a tree where it was not committed yet) by either way
        then = digest_then(commit, rel) if commit else None
        if not any(judged_unmoved(rel, was, now, record_names) for was in (
                [ABSENT, digest] if then == ABSENT else [then or digest])):
            changed.append(rel)
    return changed


def changed_since_judged(commit: str, paths: list[str], scale: str | None = None,
                         record_names=()) -> list[str] | None:
    """For a record that predates ``provenance.code``: which of ``paths`` (its closure as it is today
    and its experiment files) changed since its ``commit`` (changed_since, comment-only lines aside),
    less those that compute the same (computes_the_same) and the changes judged to move no number of
    this record (judged_unmoved from digest_then: a file the closure gained since the commit counts
    from ``absent``), in git's order of the paths the record was made from; None where git cannot
    tell."""
    changed = changed_since(commit, paths)
    if changed is None:
        return None
    return sorted((rel for rel in changed if not computes_the_same(rel, commit, scale)
                   and not judged_unmoved(rel, digest_then(commit, rel), present_digest(rel), record_names)),
                  key=layout.former_path)


def judgment_names(record: dict, card_root: Path | None = None) -> set[str]:
    """The names a judgment's ``records`` may give a record: its experiment key ``<paper>/<experiment>``
    (the fields it names, so a sweep point's record answers to the experiment it ran), and its folder
    relative to ``card_root`` (results/reference/<card>/, e.g. clicktrain/clicktrain_budget/admm_e10 or
    logs/baseline/airbench_seeds/s1) where it was read from below it (records.read's ``_dir``)."""
    names = {f"{record.get('paper')}/{record.get('experiment')}"}
    if card_root is not None and record.get("_dir"):
        folder = Path(record["_dir"]).resolve()
        if folder.is_relative_to(Path(card_root).resolve()):
            names.add(folder.relative_to(Path(card_root).resolve()).as_posix())
    return names


# ---- changes judged not to move a number ---------------------------------------------------------
def unmoved_file() -> Path:
    """config/unmoved.yaml of the repository: the maintainers' judgments (unmoved_judgments)."""
    return REPO_ROOT / "config" / "unmoved.yaml"


class UnmovedError(ValueError):
    """config/unmoved.yaml is malformed (the message names the entry and what is wrong)."""


ABSENT = "absent"  # a judgment's ``was`` for a file that did not exist at its commit (an added file)


def unmoved_judgments() -> dict[str, dict[str, dict[str, frozenset[str] | None]]]:
    """The maintainers' judgments in config/unmoved.yaml: file -> {digest before -> {digest after ->
    the records the judgment is for, None for every record}}.

    Each entry says that one change of one file (its source_digest before and after) computes no
    other number, and why (a message's text, a cache refactored behind the same choices): the staleness
    check does not count it. Judgments chain (a -> b, b -> c). A judgment is per digest, so any later
    edit of the file counts again until it is judged too. Python digests are of the syntax tree as
    this interpreter dumps it, which differs between Python minor versions: under another version a
    judgment does not match and the record shows as stale (the safe side). The judgments here were
    made under the project's Python (3.11).

    An entry with ``records: [<paper>/<experiment> or a record's folder below its card, ...]`` counts
    only in those records' checks (judgment_names): a change that moves some records' numbers and not
    others' (a model file's layer that only some experiments build) can be judged for the others
    alone. ``was: absent`` is a file that did not exist at the judgment's commit (a module the closure
    of an entry gained since); such an entry must name its records, since an added file may be
    reached by some experiments and not by others. In a chain each scoped edge counts only for its
    records."""
    path = unmoved_file()
    stat = path.stat() if path.exists() else None
    return _judgments(str(path), None if stat is None else (stat.st_mtime_ns, stat.st_size))


_RECORD_NAME = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+")


@lru_cache(maxsize=4)
def _judgments(path: str, mtime) -> dict[str, dict[str, dict[str, frozenset[str] | None]]]:
    if mtime is None:
        return {}
    data = yaml.safe_load(Path(path).read_text()) or []
    if not isinstance(data, list):
        raise UnmovedError(f"{path}: expected a list of judgments, got {type(data).__name__}")
    edges: dict[str, dict[str, dict[str, frozenset[str] | None]]] = {}
    for i, entry in enumerate(data):
        missing = [k for k in ("file", "was", "now", "reason") if not (isinstance(entry, dict) and entry.get(k))]
        if missing:
            raise UnmovedError(f"{path}: judgment {i + 1} lacks {', '.join(missing)} "
                               "(each needs file, was, now: source digests, and the reason)")
        name = f"judgment {i + 1} ({entry['file']}" + (f" since {entry['since']})" if entry.get("since") else ")")
        was, now, scope = str(entry["was"]), str(entry["now"]), entry.get("records")
        if now == ABSENT:
            raise UnmovedError(f"{path}: {name} has now: absent; a judgment ends at a present file's digest")
        if scope is not None:
            if not (isinstance(scope, list) and scope and all(
                    isinstance(r, str) and _RECORD_NAME.fullmatch(r) and not {".", ".."} & set(r.split("/")) for r in scope)):
                raise UnmovedError(f"{path}: {name}: records must be a non-empty list of <paper>/<experiment> "
                                   f"keys or record folders below the card, got {scope!r}")
            scope = frozenset(scope)
        elif was == ABSENT:
            raise UnmovedError(f"{path}: {name} has was: absent (a file added since) but no records: an added "
                               "file may be reached by some experiments and not others; name the records it "
                               "cannot move")
        afters = edges.setdefault(layout.current_path(entry["file"]), {}).setdefault(was, {})
        if scope is None or (now in afters and afters[now] is None):
            afters[now] = None  # one unscoped judgment of the change covers every record
        else:
            afters[now] = afters.get(now, frozenset()) | scope
    return edges


def judged_unmoved(rel: str, was: str | None, now: str | None, record_names=()) -> bool:
    """Whether config/unmoved.yaml judges the change of ``rel`` from digest ``was`` (ABSENT: the file
    did not exist then) to ``now`` (through any chain of judged changes) to compute the same numbers
    of a record that answers to ``record_names`` (judgment_names): unscoped judgments count for every
    record, a scoped one only where its ``records`` hold one of the names."""
    if not was or not now:
        return False
    if was == now:
        return True
    names = set(record_names or ())
    edges = unmoved_judgments().get(layout.current_path(rel), {})
    seen, todo = {was}, [was]
    while todo:
        for nxt, scope in edges.get(todo.pop(), {}).items():
            if scope is not None and not scope & names:
                continue
            if nxt == now:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def digest_at(commit: str, rel: str) -> str | None:
    """source_digest of ``rel`` at ``commit`` (None where git cannot give it or it does not parse)."""
    text = _at_commit(commit, rel)
    try:
        return None if text is None else text_digest(text, Path(rel).suffix)
    except (SyntaxError, ValueError):
        return None


def digest_then(commit: str, rel: str) -> str | None:
    """digest_at, or ABSENT where git has ``commit`` and it holds no such file (under its present or
    former path); None where that cannot be told (an unknown commit, a text that does not parse)."""
    digest = digest_at(commit, rel)
    if digest is not None or not commit or commit == "unknown" or _at_commit(commit, rel) is not None:
        return digest
    return ABSENT if _has_commit(str(REPO_ROOT), commit) else None


@lru_cache(maxsize=256)
def _has_commit(repo: str, commit: str) -> bool:
    """Whether git has ``commit`` (asked once per repository and commit)."""
    return _git("cat-file", "-e", f"{commit}^{{commit}}") is not None


def config_hash(cfg: dict) -> str:
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def collect(cfg: dict | None = None) -> dict:
    """Provenance of a run: every record carries this."""
    prov = {
        **git_state(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        **machine.host_info(),
        **machine.gpu_info(),
        "packages": {
            name: machine.package_version(name)
            for name in ("torch", "cupy-cuda13x", "cupy", "triton", "numpy", "pandas", "snakemake", "hydra-core", "mlflow")
            if machine.package_version(name)
        },
    }
    if cfg is not None:
        prov["config_hash"] = config_hash(cfg)
    return prov


