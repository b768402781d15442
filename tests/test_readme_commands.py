"""Every command of README.md runs as written on a fresh clone after `make` (issue 47): each is checked
here, without doing its work, in a temporary copy of the repository and in the virtual environment
that the README tells a reader to activate (this interpreter's bin first on PATH).

Which text is a command:
- every line of a ```bash or ```sh fenced block, its `# ...` comment dropped (blank lines skipped);
- every inline code span outside fenced blocks (a span may wrap over lines) whose text starts with
  `snakemake`, `python -m repro` or `make` (the word alone or followed by arguments).

How each is checked:
- `source .venv/bin/activate`: it names the Makefile's virtual environment;
- `snakemake ...`: words after `--config` must all be key=value (a target there is swallowed);
  then the line runs with `-n` after `snakemake` (a dry run; the copy's config says `scale: smoke`);
  `snakemake --unlock` runs as written;
- `python -m repro.pipeline.run ...`: its own precheck composes and validates the whole command line
  and writes nothing (the experiment's declared inputs stand in as `make` leaves them); `--help`
  runs as written;
- `python -m repro.<other module> ...`: parsed by the module's own argparse parser, not run;
- `make ...`: `make -n ...` (the recipes printed, not run).
Placeholders (`<file>`, ...) are filled from PLACEHOLDERS; SKIPPED names the commands that cannot be
checked here, each with the reason.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from repro import layout

from conftest import REPO, SMOKE_COPY, copy_repository, venv_env

README = REPO / "README.md"
COMMAND = re.compile(r"^((snakemake|make)(\s|$)|python -m repro(\.|\s|$))")
# <file> stands for each figure of README's results table (its command column); the others:
PLACEHOLDERS = {"<command>": "true", "<unpacked>": "unpacked", "<net>": "resnet50"}
SKIPPED = {
    "snakemake --cores all --sdm apptainer": "needs Apptainer (not a Debian 12 package, not installed here)",
    "snakemake --report report.html": "needs every output of the whole DAG; tests/test_snakemake_report.py "
                                      "builds a report of a smoke slice",
    "snakemake --report report.html tsm2x": "needs the tsm2x slice's outputs; tests/test_snakemake_report.py "
                                            "builds a report of a smoke slice",
}
# commands for a SLURM cluster: they need the `slurm` extra (README: `pip install -e .[slurm]`)
NEEDS_SLURM_PLUGIN = re.compile(r"--executor slurm|--profile profiles/slurm")
# python -m <module> with the module's argparse parser; run as written only for --help
PARSE_ONLY = """
import argparse, runpy, sys
parse = argparse.ArgumentParser.parse_args
def parse_only(self, args=None, namespace=None):
    parse(self, args, namespace)
    sys.exit(0)
argparse.ArgumentParser.parse_args = parse_only
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
PRECHECK = "import sys; from repro.pipeline.run import precheck; sys.exit(precheck(sys.argv[1:]))"


def readme_commands(text: str) -> list[str]:
    """The README's commands, by the rule above, in order, each once."""
    commands, prose, block = [], [], None
    for line in text.splitlines():
        fence = re.match(r"^```(\w*)", line)
        if fence:
            block = fence.group(1) if block is None else None
            prose.append("")
        elif block is None:
            prose.append(line)
        elif block in ("bash", "sh") and (command := re.sub(r"(^|\s+)#.*$", "", line).strip()):
            commands.append(command)
    spans = (" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(prose)))
    commands += [span for span in spans if COMMAND.match(span)]
    return list(dict.fromkeys(commands))


def table_figures(text: str) -> list[str]:
    """The figures of README's results table (its command column), placeholders filled."""
    table = text.split("<!-- results-table:start -->")[1].split("<!-- results-table:end -->")[0]
    return list(dict.fromkeys(fill(p) for p in re.findall(r"`(results/figures/\S+?\.png)`", table)))


def fill(command: str) -> str:
    for name, value in PLACEHOLDERS.items():
        command = command.replace(name, value)
    if "<file>" in command:
        command = command.replace("<file>", " ".join(table_figures(README.read_text())))
    left = re.findall(r"<\w+>", command)
    assert not left, f"{command}: placeholder(s) {left} not in PLACEHOLDERS"
    return command


def run(argv: list[str], work: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=work, env=venv_env(work), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"`{shlex.join(argv)}` exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def swallowed(words: list[str]) -> list[str]:
    """Words after `--config` that are not key=value (until the next option): Snakemake reads them as
    config items, so a target placed there fails."""
    if "--config" not in words:
        return []
    after = words[words.index("--config") + 1:]
    end = next((i for i, w in enumerate(after) if w.startswith("-")), len(after))
    return [w for w in after[:end] if "=" not in w]


def module_source(module: str) -> Path:
    base = layout.PACKAGE_ROOT.joinpath(*module.split(".")[1:])
    return base / "__main__.py" if base.is_dir() else base.with_suffix(".py")


def check(command: str, work: Path) -> None:
    """Check one README command in ``work`` (a copy of the repository); AssertionError says what is wrong."""
    words = shlex.split(fill(command))
    if words[0] == "source":
        venv = re.search(r"^VENV\s*\?=\s*(\S+)", (REPO / "Makefile").read_text(), re.M).group(1)
        assert words[1:] == [f"{venv}/bin/activate"], f"{command}: the Makefile's venv is {venv}"
    elif words[0] == "snakemake":
        bad = swallowed(words)
        assert not bad, f"{command}: {bad} after --config would be read as config items: put targets before --config"
        run(words if "--unlock" in words else [words[0], "-n", *words[1:]], work)
    elif words[0] == "make":
        run(["make", "-n", *words[1:]], work)
    elif words[:3] == ["python", "-m", "repro.pipeline.run"] and "--help" not in words:
        experiment = next((w.split("=", 1)[1] for w in words if w.startswith("experiment=")), None)
        declared = layout.inputs(experiment).values() if experiment in layout.experiment_names() else ()
        stand_ins = [work / "results" / path for path in declared if not (work / "results" / path).exists()]
        for path in stand_ins:  # what `make` made before a hand run
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        try:
            run([sys.executable, "-c", PRECHECK, *words[3:]], work)
        finally:
            for path in stand_ins:
                path.unlink()
    elif words[:2] == ["python", "-m"] and "--help" not in words:
        assert "parse_args(" in module_source(words[2]).read_text(), \
            f"{command}: {words[2]} has no argparse parser to check the command with: add a check for it here"
        run([sys.executable, "-c", PARSE_ONLY, *words[2:]], work)
    elif words[:2] == ["python", "-m"]:
        run(words, work)
    else:
        raise AssertionError(f"{command}: no check for this kind of command")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A copy of the repository as a fresh clone has it, with `scale: smoke` in its config."""
    work = copy_repository(tmp_path_factory.mktemp("readme") / "repo", (*SMOKE_COPY, "Makefile"))
    config = work / "config" / "config.yaml"
    text, n = re.subn(r"^scale: auto$", "scale: smoke", config.read_text(), flags=re.M)
    assert n == 1
    config.write_text(text)
    return work


COMMANDS = readme_commands(README.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs_as_written(command, work):
    if command in SKIPPED:
        pytest.skip(SKIPPED[command])
    if NEEDS_SLURM_PLUGIN.search(command) and importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        # README says to install it first (`pip install -e .[slurm]`); .ci/run does (`make slurm-plugin`)
        pytest.skip("needs the SLURM executor plugin, which `make setup` leaves out: `make slurm-plugin` first")
    check(command, work)


def test_the_rule_finds_the_commands():
    assert COMMANDS[:3] == ["make", "make test", "source .venv/bin/activate"]  # the set-up, then activation
    for command in ("snakemake --cores all tsm2x --config scale=smoke", "python -m repro.pipeline.run --help",
                    "snakemake --cores all <file>", "make mlflow-ui", "snakemake --report report.html"):
        assert command in COMMANDS
    assert not SKIPPED.keys() - set(COMMANDS), "SKIPPED names commands that README.md no longer has"
    assert len(table_figures(README.read_text())) >= 30


@pytest.mark.parametrize("command, says", [
    ("snakemake --cores all --config scale=smoke tsm2x", "put targets before --config"),
    ("snakemake --cores all results/figures/tsm2x/no_such.png", "MissingRuleException|No rule to produce"),
    ("snakemake --cores all --config scael=smoke", "scael"),
    ("python -m repro.pipeline.run experiment=tsm2x/tsm2_r experiment.params.repeats=50", "repeats: unknown key"),
    ("python -m repro.pipeline.run experiment=tsm2x/no_such", "no such experiment"),
    ("python -m repro.pipeline.reference status --stael", "unrecognized arguments: --stael"),
    ("python -m repro.pipeline.reference publsh", "invalid choice: 'publsh'"),
    ("make no-such-target", "No rule to make target"),
])
def test_a_broken_command_fails_the_check(command, says, work):
    with pytest.raises(AssertionError, match=says):
        check(command, work)
