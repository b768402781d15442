"""The warm runner (repro.pipeline.warm): a job run through a server behaves as the cold
`python -m <module>`: exit status, streams, working directory, environment, arguments, signals; it
runs cold where it must (REPRO_WARM=0, SLURM); servers idle out, refuse other users and hand each
child fresh random state. Each test has its own socket folder and a module of its own on PYTHONPATH."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from repro.pipeline import warm

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(warm.disabled_reason({}) is not None, reason=f"no warm runner here: {warm.disabled_reason({})}")

MODULE = r'''
import json, os, random, signal, sys, time
import numpy as np

mode = sys.argv[1] if len(sys.argv) > 1 else "info"
if mode == "info":
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "only": os.environ.get("ONLY_IN_CLIENT"),
                      "pid": os.getpid(), "ppid": os.getppid(), "random": random.random(),
                      "np_random": float(np.random.random()), "umask": os.umask(0o022)}))
elif mode == "exit":
    print("out"); print("err", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
elif mode == "message":
    sys.exit("a message")
elif mode == "raise":
    raise ValueError("boom")
elif mode == "signal":
    sys.stdout.flush()
    os.kill(os.getpid(), int(sys.argv[2]))
    time.sleep(5)
elif mode == "echo":
    data = sys.stdin.read()
    sys.stdout.write(data.upper()); sys.stderr.write("to stderr\n")
elif mode == "sleep":
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "start": time.time()}), flush=True)
    time.sleep(float(sys.argv[2]))
    print(json.dumps({"end": time.time()}), flush=True)
'''


@pytest.fixture
def wenv(tmp_path):
    """(env, socket folder) for warm runs of the test module `wtmod`; stops the servers at the end."""
    (tmp_path / "wtmod.py").write_text(MODULE)
    sock_dir = tempfile.mkdtemp(prefix="rw-", dir="/tmp")  # short: a socket path has at most 107 bytes
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REPRO_WARM", "SLURM_", "SINGULARITY", "APPTAINER")) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{tmp_path}", REPRO_WARM_DIR=sock_dir, REPRO_WARM_IDLE="60")
    yield env, Path(sock_dir)
    subprocess.run([sys.executable, "-m", "repro.pipeline.warm", "--stop"], env=env, capture_output=True, timeout=30)
    deadline = time.monotonic() + 10
    while list(Path(sock_dir).glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(sock_dir, ignore_errors=True)


def client(env, *args, cwd=None, **kw):
    return subprocess.run([sys.executable, "-m", "repro.pipeline.warm", "wtmod", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, **kw)


def cold(env, *args, cwd=None, **kw):
    return subprocess.run([sys.executable, "-m", "wtmod", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, **kw)


def info(env, *args, **kw):
    proc = subprocess.Popen([sys.executable, "-m", "repro.pipeline.warm", "wtmod", "info", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    found = json.loads(out)
    found["warm"] = found["pid"] != proc.pid  # a cold run is the client process itself
    return found


def warm_up(env, cwd=None):
    """Run until a call goes through a server (the first starts it and runs cold)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if info(env, cwd=cwd)["warm"]:
            return
        time.sleep(0.2)
    pytest.fail("no warm server came up")


def test_cold_first_then_warm(wenv):
    env, sock_dir = wenv
    assert not info(env)["warm"]  # no server yet: this one ran in the client's process
    warm_up(env)
    assert len(list(sock_dir.glob("*.sock"))) == 1
    assert (sock_dir / "server.log").read_text().count("preloaded") == 1
    assert info(env)["warm"]


@pytest.mark.parametrize("args", [["exit", "0"], ["exit", "3"], ["message"], ["raise"], ["signal", str(int(signal.SIGUSR1))]])
def test_exit_status_and_output_as_cold(wenv, args):
    env, _ = wenv
    warm_up(env)
    got, want = client(env, *args), cold(env, *args)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    expected = {"0": 0, "3": 3}.get(args[-1], -signal.SIGUSR1 if args[0] == "signal" else 1)
    assert got.returncode == expected
    if args == ["raise"]:
        assert got.stderr.startswith("Traceback (most recent call last):") and "ValueError: boom" in got.stderr
        assert "warm.py" not in got.stderr  # the runner's own frames are not shown


def test_streams_are_the_clients(wenv):
    env, _ = wenv
    warm_up(env)
    got = client(env, "echo", input="some input\n")
    assert (got.returncode, got.stdout, got.stderr) == (0, "SOME INPUT\n", "to stderr\n")


def test_cwd_environment_and_arguments_reach_the_child(wenv, tmp_path):
    env, _ = wenv
    sub = tmp_path / "a folder"  # made first: a new entry in a sys.path folder changes the key
    sub.mkdir()
    warm_up(dict(env, ONLY_IN_CLIENT="the server's"))  # the server starts with this client's environment
    args = ["x y", "", "--flag=1", "ünïcode", "$HOME", "a\nb"]
    found = info(dict(env, ONLY_IN_CLIENT="here"), *args, cwd=sub)
    assert found["warm"]
    assert (found["argv"], found["cwd"], found["only"]) == (["info", *args], str(sub), "here")
    assert info(env)["only"] is None  # neither the server's variables nor a previous client's stay


def test_umask_reaches_the_child(wenv):
    env, _ = wenv
    warm_up(env)
    proc = subprocess.run(["sh", "-c", f"umask 0077; exec {sys.executable} -m repro.pipeline.warm wtmod info"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout)["umask"] == 0o077


def test_children_get_fresh_random_state(wenv):
    """Two children of one server draw different numbers (random reseeds itself after a fork, numpy 2
    too; the server reseeds both anyway, as a fresh process is seeded from the OS)."""
    env, _ = wenv
    warm_up(env)
    a, b = info(env), info(env)
    assert a["warm"] and b["warm"]
    assert a["random"] != b["random"] and a["np_random"] != b["np_random"]


def test_two_concurrent_clients(wenv):
    env, _ = wenv
    warm_up(env)
    procs = [subprocess.Popen([sys.executable, "-m", "repro.pipeline.warm", "wtmod", "sleep", "1.5"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    spans = [[json.loads(line) for line in out.splitlines()] for out in outs]
    assert all(s[0]["pid"] != p.pid for s, p in zip(spans, procs))  # both warm
    (s1, e1), (s2, e2) = [(s[0]["start"], s[1]["end"]) for s in spans]
    assert s1 < e2 and s2 < e1  # they ran side by side


def _wait_gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # dead, not yet reaped (an orphan's reaper may be slow or absent in a container)
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_to_the_client_ends_the_child(wenv, sig):
    env, _ = wenv
    warm_up(env)
    # SIGINT at its default in the client: a shell without job control (CI's background steps) starts
    # the tests with SIGINT ignored, and an ignored signal stays ignored, in the client as in a cold
    # process, so that a SIGINT would end neither
    proc = subprocess.Popen([sys.executable, "-m", "repro.pipeline.warm", "wtmod", "sleep", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child = json.loads(proc.stdout.readline())["pid"]
    assert child != proc.pid
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert _wait_gone(child), "the job outlived its client"
    assert proc.returncode == -sig  # as the cold process, killed by it (SIGINT: after its traceback)
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in err


def test_a_killed_server_takes_its_running_job_along(wenv):
    env, _ = wenv
    warm_up(env)
    proc = subprocess.Popen([sys.executable, "-m", "repro.pipeline.warm", "wtmod", "sleep", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = json.loads(proc.stdout.readline())
    os.kill(started["ppid"], signal.SIGKILL)  # the server
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "lost the server" in err
    assert _wait_gone(started["pid"]), "the job ran on without its server"


@pytest.mark.parametrize("var", [{"REPRO_WARM": "0"}, {"SLURM_JOB_ID": "123"}])
def test_disabled_runs_in_process_without_a_server(wenv, var):
    env, sock_dir = wenv
    for _ in range(2):
        assert not info(dict(env, **var))["warm"]
    time.sleep(0.5)
    assert not list(sock_dir.glob("*.sock")) and not (sock_dir / "server.log").exists()


def test_a_changed_source_file_or_package_folder_changes_the_key(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    f = tmp_path / "pkg" / "a.py"
    f.write_text("x = 1\n")
    before = warm.source_digest(str(tmp_path))
    assert warm.source_digest(str(tmp_path)) == before
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    assert warm.source_digest(str(tmp_path)) != before
    key = warm.compute_key("wtmod")
    monkeypatch.setattr(warm, "source_digest", lambda root: "another")
    assert warm.compute_key("wtmod") != key
    assert warm.compute_key("repro.figures") != warm.compute_key("repro.pipeline.run")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])  # a package installed there: a new server
    key = warm.compute_key("wtmod")
    os.utime(tmp_path, ns=(tmp_path.stat().st_atime_ns, tmp_path.stat().st_mtime_ns + 1_000_000))
    assert warm.compute_key("wtmod") != key


def test_server_idles_out(wenv):
    env, sock_dir = wenv
    env = dict(env, REPRO_WARM_IDLE="1")
    warm_up(env)
    deadline = time.monotonic() + 15
    while list(sock_dir.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(sock_dir.glob("*.sock"))
    assert "idle for 1 s: exiting" in (sock_dir / "server.log").read_text()
    assert not info(env)["warm"]


def test_status_and_stop(wenv):
    env, sock_dir = wenv
    warm_up(env)
    status = subprocess.run([sys.executable, "-m", "repro.pipeline.warm", "--status"], env=env, capture_output=True,
                            text=True, timeout=30).stdout
    assert "1 warm server(s)" in status and "wtmod" in status
    subprocess.run([sys.executable, "-m", "repro.pipeline.warm", "--stop"], env=env, check=True, timeout=30,
                   capture_output=True)
    deadline = time.monotonic() + 10
    while list(sock_dir.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(sock_dir.glob("*.sock"))


def test_help():
    proc = subprocess.run([sys.executable, "-m", "repro.pipeline.warm", "--help"], capture_output=True, text=True,
                          timeout=30, env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert proc.returncode == 0 and "REPRO_WARM=0" in proc.stdout and "--stop" in proc.stdout


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused(wenv):
    env, sock_dir = wenv
    warm_up(env)
    sock = next(sock_dir.glob("*.sock"))
    os.chmod(sock_dir, 0o755)
    os.chmod(sock, 0o777)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # connect as nobody (a fork: that user may not run this interpreter)
        reply = "child failed"
        try:
            os.setgid(65534)
            os.setuid(65534)
            import socket

            s = socket.socket(socket.AF_UNIX)
            s.connect(str(sock))
            try:
                warm.send_msg(s, {"v": warm.VERSION, "module": "wtmod", "args": [], "cwd": "/", "env": {}, "path": []},
                              fds=[0, 1, 2])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may have refused and closed before reading
            reply = json.dumps(warm.recv_msg(s)[0])
        except BaseException as exc:  # noqa: BLE001
            reply = f"child failed: {exc!r}"
        finally:
            os.write(w, reply.encode())
            os._exit(0)
    os.close(w)
    try:
        os.waitpid(pid, 0)
        reply = os.read(r, 4096).decode()
    finally:
        os.close(r)
        os.chmod(sock_dir, 0o700)
    assert reply.startswith("{") and "not this user's" in reply and "pid" not in reply
    assert "refused a connection of uid 65534" in (sock_dir / "server.log").read_text()


def test_the_figure_servers_warm_up_changes_no_figure():
    """The figures server draws one figure before it serves (fonts and text layouts loaded once, not
    in every child): rcParams and pyplot's figures stay as they were, and a figure drawn after it is
    byte for byte the one a fresh process draws."""
    script = r'''
import io, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import seaborn as sns
from repro.pipeline import warm

def draw():
    fig, ax = plt.subplots(figsize=(4, 3))
    sns.lineplot(x=[1, 2, 4, 8], y=[3.0, 1.5, 2.5, 0.7], marker="o", ax=ax, label="ours")
    ax.set(title="speed-up 1.3x", xlabel="k", ylabel=r"$\mu$s", xscale="log")
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return out.getvalue()

if sys.argv[1] == "warm":
    before = dict(matplotlib.rcParams)
    warm._warm_text()
    assert dict(matplotlib.rcParams) == before and plt.get_fignums() == []
sys.stdout.buffer.write(draw())
'''
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cold, warmed = (subprocess.run([sys.executable, "-c", script, mode], capture_output=True, env=env, timeout=120)
                    for mode in ("cold", "warm"))
    assert cold.returncode == 0 and warmed.returncode == 0, (cold.stderr + warmed.stderr)[-2000:]
    assert cold.stdout.startswith(b"\x89PNG") and warmed.stdout == cold.stdout
