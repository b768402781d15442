"""The warm runner: ``python -m repro.pipeline.warm <module> [args...]`` runs ``python -m <module> [args...]``
in a child forked from a per-user server that has the module's heavy imports (matplotlib, pandas,
seaborn; numpy, torch, Hydra...) loaded already, so a workflow job starts in tens of milliseconds
instead of paying its imports (about 1.4 s) each time.

The client (this module run as a script) imports only the standard library. It finds the server of
its key: a hash of the interpreter, its flags and sys.path, the ``repro`` source tree and every
``*.py`` file's (path, mtime, size) under it, the module's group (figures, runner, or the module
itself), the environment variables read at import time (``PYTHON*``, ``LC_*``, ``MPL*``, the
thread counts...) and the resource limits. Its socket is ``<dir>/<key>.sock``, dir being
``$REPRO_WARM_DIR``, else ``$XDG_RUNTIME_DIR/repro-warm``, else ``/tmp/repro-warm-<uid>`` (mode 0700,
owned by the user; the servers' log is ``server.log`` there). When the server answers, the client
hands it the command line, working directory, environment, umask, signal mask and its stdin, stdout
and stderr (SCM_RIGHTS), forwards SIGINT/SIGTERM/SIGHUP to the child and ends as the child ended
(its exit code, or killed by the same signal). When no server answers, it starts one in the
background and runs the module in its own process this time (a cold start costs nothing more); so
does any failure before the child starts (silently, unless ``REPRO_WARM_DEBUG=1``).

Cold, without a server: ``REPRO_WARM=0``, inside a SLURM job (``SLURM_JOB_ID``), inside a container
(Apptainer/Singularity, Podman), or without fork and Unix sockets. An edited source file changes the
key: the old server idles out (``REPRO_WARM_IDLE`` seconds without a request, default 120) and the
next job starts a new one. ``--stop`` stops this user's servers, ``--status`` lists them.
"""

import sys

import os
import socket
import struct
import json
import hashlib
import signal

VERSION = 1
GROUPS = {"repro.figures": "figures", "repro.pipeline.run": "runner"}
# what each group's server imports besides the entry module's own top-level imports (each may be missing)
PRELOAD = {
    "figures": ["matplotlib", "matplotlib.pyplot", "numpy", "pandas", "scipy.stats", "seaborn"],
    "runner": ["numpy", "pandas", "torch", "yaml", "hydra", "omegaconf", "hydra.core.override_parser.overrides_parser",
               "hydra.core.hydra_config", "logging.config"],
}
# environment variables read while modules are imported (or by the interpreter at start-up): the
# server's values stand in every child, so they are part of the key
KEY_ENV_PREFIXES = ("PYTHON", "LC_", "MPL", "MATPLOTLIB", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "NUMEXPR_",
                    "VECLIB_", "TORCH", "PYTORCH", "HYDRA", "REPRO_")
KEY_ENV_NAMES = ("LANG", "LANGUAGE", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "CUDA_VISIBLE_DEVICES")
KEY_ENV_SKIP = ("REPRO_WARM", "REPRO_WARM_DEBUG", "REPRO_WARM_IDLE", "REPRO_WARM_DIR", "REPRO_WORKFLOW_PID")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CONTAINER_MARKERS = ("/.singularity.d", "/run/.containerenv")
USAGE = """usage: python -m repro.pipeline.warm <module> [args...]
       python -m repro.pipeline.warm --status | --stop | --help

Runs `python -m <module> [args...]` in a process forked from a warm server that has the module's
imports loaded (started in the background by the first call, which runs cold; it exits after
REPRO_WARM_IDLE seconds without a request, default 120). Behaviour, outputs and exit status are those
of the cold command.
  --status   list this user's servers
  --stop     stop this user's servers
Environment: REPRO_WARM=0 runs cold (as do SLURM jobs and containers); REPRO_WARM_DIR the socket
folder (default $XDG_RUNTIME_DIR/repro-warm or /tmp/repro-warm-<uid>; server.log there);
REPRO_WARM_DEBUG=1 says on stderr why a call ran cold.
"""


def _debug(msg: str) -> None:
    if os.environ.get("REPRO_WARM_DEBUG") == "1":
        sys.stderr.write(f"repro.pipeline.warm: {msg}\n")
        sys.stderr.flush()


# ---------------------------------------------------------------------------------------------- key


def disabled_reason(env=None) -> str | None:
    """Why a call with environment ``env`` (default: this process's) must run cold (None: it may use a server)."""
    env = os.environ if env is None else env
    if env.get("REPRO_WARM") == "0":
        return "REPRO_WARM=0"
    if env.get("SLURM_JOB_ID"):
        return "inside a SLURM job"
    if env.get("SINGULARITY_CONTAINER") or env.get("APPTAINER_CONTAINER") or any(map(os.path.exists, CONTAINER_MARKERS)):
        return "inside a container"
    if not (hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and hasattr(socket, "send_fds")):
        return "no fork or Unix-socket descriptor passing on this platform"
    return None


def socket_dir(create: bool = True) -> str | None:
    """The user's socket folder (created mode 0700), or None when it is not safely ours."""
    base = os.environ.get("REPRO_WARM_DIR")
    if not base:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = os.path.join(runtime, "repro-warm") if runtime and os.path.isdir(runtime) else f"/tmp/repro-warm-{os.getuid()}"
    if create:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            _debug(f"cannot create {base}: {exc}")
            return None
    try:
        st = os.lstat(base)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        _debug(f"{base} is not a folder of this user's with mode 0700: not used")
        return None
    return base


def group_of(module: str) -> str:
    return GROUPS.get(module, module)


def source_digest(root: str) -> str:
    """A digest of (path, mtime_ns, size) of every .py file under ``root``."""
    h = hashlib.sha256()
    stack = [root]
    while stack:
        entries = []
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        stack.append(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    entries.append(f"{e.path}\0{st.st_mtime_ns}\0{st.st_size}")
        for line in sorted(entries):
            h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def repro_root() -> str:
    import repro

    return os.path.dirname(os.path.realpath(repro.__file__))


def compute_key(module: str) -> str:
    import resource

    env = {k: v for k, v in os.environ.items()
           if (k.startswith(KEY_ENV_PREFIXES) or k in KEY_ENV_NAMES) and k not in KEY_ENV_SKIP}
    limits = []
    for name in ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CPU", "RLIMIT_CORE",
                 "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_MEMLOCK"):
        if hasattr(resource, name):
            limits.append(resource.getrlimit(getattr(resource, name)))
    root = repro_root()
    # a package installed, upgraded or removed changes its folder's mtime: the server's imports are stale
    folders = []
    for entry in sys.path[1:]:
        try:
            folders.append(os.stat(entry).st_mtime_ns)
        except OSError:
            folders.append(None)
    parts = [VERSION, sys.executable, list(sys.flags), sys.warnoptions, sorted(sys._xoptions.items()),
             sys.path[1:], folders, root, source_digest(root), group_of(module), sorted(env.items()), limits,
             os.path.exists("matplotlibrc")]
    return hashlib.sha256(json.dumps(parts, default=str).encode("utf-8", "surrogateescape")).hexdigest()[:24]


# ----------------------------------------------------------------------------------------- protocol


def send_msg(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack("!I", len(data)) + data
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def recv_msg(sock: socket.socket, maxfds: int = 0):
    """One message (None at end of stream) and the descriptors that came with it."""
    fds: list[int] = []
    buf = b""
    need = 4
    length = None
    while len(buf) < need:
        if maxfds and not fds:
            chunk, got, _flags, _addr = socket.recv_fds(sock, max(need - len(buf), 4096) if length is None else need - len(buf), maxfds)
            fds += got
        else:
            chunk = sock.recv(need - len(buf))
        if not chunk:
            for fd in fds:
                os.close(fd)
            if buf:
                raise ConnectionError("truncated message")
            return None, []
        buf += chunk
        if length is None and len(buf) >= 4:
            length = struct.unpack("!I", buf[:4])[0]
            need = 4 + length
    if len(buf) > need:
        raise ConnectionError("protocol error: more data than announced")
    return json.loads(buf[4:].decode()), fds


# ------------------------------------------------------------------------------------------- client


def _ignored_signals() -> list[int]:
    found = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                found.append(int(sig))
        except (ValueError, OSError):
            pass
    return found


def _cold_argv(module: str, args: list[str]) -> list[str]:
    """sys.orig_argv of the cold command `python [flags] -m module args`."""
    orig = list(getattr(sys, "orig_argv", [sys.executable]))
    try:
        i = orig.index("-m")
        return orig[:i] + ["-m", module] + list(args)
    except ValueError:
        return [orig[0], "-m", module] + list(args)


def _start_server(dirname: str, key: str, module: str) -> None:
    """Start this key's server in the background (unless one is starting: its lock is held)."""
    import fcntl
    import subprocess

    lock = os.path.join(dirname, f"{key}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        _debug("a server is starting")
        return
    finally:
        os.close(fd)
    log = os.open(os.path.join(dirname, "server.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        subprocess.Popen([sys.executable, *subprocess._args_from_interpreter_flags(), "-m", "repro.pipeline.warm",
                          "--serve", dirname, key, module],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True)
    finally:
        os.close(log)


def run_in_process(module: str, args: list[str]) -> None:
    """`python -m module args` in this process (the cold path), in a fresh ``__main__`` module as
    `python -m` runs it (an uncaught exception's traceback shows the same frames)."""
    import runpy

    _fresh_main(args)
    try:
        runpy._run_module_as_main(module, alter_argv=True)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - as the interpreter: traceback, status 1
        sys.excepthook(type(exc), *_trimmed(exc))
        sys.exit(1)


def _fresh_main(args: list[str]):
    """A new, empty ``__main__`` module and sys.argv as `python -m` starts them (this module's
    functions keep their own globals); returns the module."""
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-m", *args]
    return main


def _trimmed(exc: BaseException):
    """The exception and its traceback without this module's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return exc.with_traceback(tb), tb


def _die_like(status: int) -> None:
    """End this process as the child ended: its exit code, or the same signal (128+signo if it survives)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def run_warm(module: str, args: list[str]) -> bool:
    """Run through the key's server; False (nothing started) when there is none or it failed before
    the child started. Never returns once the child has started."""
    why = disabled_reason()
    if why:
        _debug(f"cold: {why}")
        return False
    dirname = socket_dir()
    if dirname is None:
        return False
    try:
        key = compute_key(module)
    except Exception as exc:  # noqa: BLE001 - any failure before the child runs: cold
        _debug(f"cold: no key ({exc!r})")
        return False
    path = os.path.join(dirname, f"{key}.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        _debug(f"cold: no server at {path} ({exc.strerror}); starting one")
        try:
            _start_server(dirname, key, module)
        except Exception as exc2:  # noqa: BLE001
            _debug(f"could not start a server: {exc2!r}")
        return False
    umask = os.umask(0)
    os.umask(umask)
    request = {"v": VERSION, "module": module, "args": list(args), "cwd": os.getcwd(), "env": dict(os.environ),
               "path": sys.path, "orig_argv": _cold_argv(module, args), "ignored": _ignored_signals(),
               "mask": [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])], "umask": umask}
    pending: list[int] = []
    state = {"started": False}

    def forward(signum, _frame):
        if state["started"]:
            try:
                send_msg(sock, {"signal": signum})
            except OSError:
                pass
        else:
            pending.append(signum)

    ignored = set(request["ignored"])

    def restore_handlers():  # the cold process's: the job runs here after all
        for sig in FORWARDED:
            if int(sig) not in ignored:
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)

    try:
        for sig in FORWARDED:
            if int(sig) not in ignored:
                signal.signal(sig, forward)
        send_msg(sock, request, fds=[0, 1, 2])
        reply, _ = recv_msg(sock)
    except (OSError, ValueError, ConnectionError) as exc:
        _debug(f"cold: the server failed ({exc!r})")
        sock.close()
        restore_handlers()
        for sig in pending:  # a signal before the child started: as if it came to the cold process
            os.kill(os.getpid(), sig)
        return False
    if not reply or "pid" not in reply:
        _debug(f"cold: the server refused ({reply and reply.get('error')})")
        sock.close()
        restore_handlers()
        return False
    state["started"] = True
    for sig in pending:
        forward(sig, None)
    while True:
        try:
            msg, _ = recv_msg(sock)
        except (OSError, ConnectionError) as exc:
            msg, lost = None, repr(exc)
        else:
            lost = "the connection closed"
        if msg is None:  # the server died (killed?): its child must not run on unwatched
            try:
                os.kill(reply["pid"], signal.SIGKILL)
            except OSError:
                pass
            sys.stderr.write(f"repro.pipeline.warm: lost the server before the job ended ({lost}): job stopped\n")
            os._exit(1)
        if "status" in msg:
            _die_like(msg["status"])


# ------------------------------------------------------------------------------------------- server


def _entry_imports(module: str) -> list[str]:
    """The modules that the entry module's top-level import statements name (the cold run imports them first)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    tree = ast.parse(open(spec.origin, "rb").read())
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and node.module != "__future__":
            found.append(node.module)
            found += [f"{node.module}.{a.name}?" for a in node.names]  # '?': a submodule, or just a name
    return found


def preload(group: str, module: str) -> list[str]:
    """Import the group's modules and the entry module's top-level imports (never the entry module
    itself: the cold run executes it as __main__); the ones that failed."""
    import importlib
    import importlib.util

    failed = []
    if group == "figures":
        try:
            import matplotlib

            matplotlib.use("Agg")
        except Exception:  # noqa: BLE001
            failed.append("matplotlib")
    for name in [*PRELOAD.get(group, []), *_entry_imports(module)]:
        maybe = name.endswith("?")
        name = name.rstrip("?")
        if name in sys.modules:
            continue
        try:
            if maybe:
                parent, _, attr = name.rpartition(".")
                if hasattr(sys.modules.get(parent), attr) or importlib.util.find_spec(name) is None:
                    continue
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing or broken module is imported by the job as cold
            if not maybe:
                failed.append(name)
    if group == "figures" and not failed:
        _warm_text()
    return failed


def _warm_text() -> None:
    """Draw and save (PNG and PDF, to memory) one small figure with a title, ticks, a legend and
    mathtext, so that the fonts it opens and the glyphs and text layouts it caches are loaded once
    in the server and inherited by every child instead of loaded again in each. Leaves rcParams and
    pyplot's figures as they were; a failure leaves the children to load them themselves."""
    import io

    try:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(3, 2))
        try:
            ax.plot([1, 2, 3], [1, 4, 2], marker="o", label="a")
            ax.set(title="Title 0.5x", xlabel="size (MiB)", ylabel=r"$\mu$s per call", xscale="log")
            ax.legend(title="legend")
            fig.text(0.99, 0.01, "note", ha="right", fontsize=7)
            for fmt in ("png", "pdf"):
                fig.savefig(io.BytesIO(), format=fmt, dpi=150, bbox_inches="tight")
        finally:
            plt.close(fig)
    except Exception:  # noqa: BLE001
        pass


class Server:
    def __init__(self, dirname: str, key: str, module: str):
        self.dirname, self.key, self.module = dirname, key, module
        self.group = group_of(module)
        self.path = os.path.join(dirname, f"{key}.sock")
        self.idle = float(os.environ.get("REPRO_WARM_IDLE", "120"))
        self.children: dict[int, socket.socket] = {}
        import time

        self.started = time.time()
        self.served = 0

    def log(self, msg: str) -> None:
        import time

        sys.stdout.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()} {self.key[:8]} {self.group}] {msg}\n")
        sys.stdout.flush()

    def serve(self) -> int:
        import fcntl
        import selectors
        import time
        import gc

        self.lock_fd = os.open(os.path.join(self.dirname, f"{self.key}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another server of this key is starting or running: exit quietly
        t0 = time.monotonic()
        failed = preload(self.group, self.module)
        os.chdir("/")  # holds no folder busy; each child goes to its client's
        self.log(f"preloaded in {time.monotonic() - t0:.2f} s ({len(sys.modules)} modules"
                 f"{'; failed: ' + ', '.join(failed) if failed else ''})")
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.inode = os.stat(self.path).st_ino
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._stop_signal)
        self.stopping = False
        gc.freeze()  # the preloaded objects stay shared with the children (copy-on-write)
        sel = self.sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, "listen")
        sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        last = time.monotonic()
        try:
            while True:
                for skey, _ in sel.select(timeout=1.0):
                    if skey.data == "listen":
                        self._accept(sel)
                        last = time.monotonic()
                    elif skey.data == "wake":
                        try:
                            while os.read(self.wake_r, 512):
                                pass
                        except BlockingIOError:
                            pass
                    else:
                        self._client_event(sel, skey.fileobj, skey.data)
                self._reap(sel)
                if self.children:
                    last = time.monotonic()
                if not self.children and (self.stopping or time.monotonic() - last >= self.idle):
                    self.log("stopping" if self.stopping else f"idle for {self.idle:g} s: exiting")
                    return 0
                if not self._socket_is_ours():
                    self.stopping = True
                    if not self.children:
                        self.log("socket removed or replaced: exiting")
                        return 0
        finally:
            if self._socket_is_ours():
                os.unlink(self.path)
            self.listener.close()

    def _stop_signal(self, signum, _frame):
        self.stopping = True

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def _accept(self, sel) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(10)
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                self.log(f"refused a connection of uid {uid} (pid {pid})")
                send_msg(conn, {"error": "not this user's"})
                conn.close()
                return
            req, fds = recv_msg(conn, maxfds=3)
        except (OSError, ValueError, ConnectionError) as exc:
            self.log(f"bad request: {exc!r}")
            conn.close()
            return
        if req is None:
            conn.close()
            return
        if req.get("stop"):
            self.stopping = True
            self._reply(conn, {"ok": True})
            return
        if req.get("status"):
            self._reply(conn, {"pid": os.getpid(), "key": self.key, "group": self.group, "module": self.module,
                               "children": len(self.children), "served": self.served, "started": self.started,
                               "idle_s": self.idle})
            return
        if req.get("v") != VERSION or len(fds) != 3 or self.stopping:
            for fd in fds:
                os.close(fd)
            why = "stopping" if self.stopping else "version or descriptors"
            self._reply(conn, {"error": why})
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(conn, req, fds)  # never returns
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        try:
            send_msg(conn, {"pid": pid})
        except OSError:
            pass
        conn.settimeout(None)
        conn.setblocking(False)
        sel.register(conn, _EVENT_READ, pid)

    def _reply(self, conn, obj) -> None:
        try:
            send_msg(conn, obj)
        except OSError:
            pass
        conn.close()

    def _client_event(self, sel, conn, pid) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(5)
            msg, _ = recv_msg(conn)
        except (OSError, ValueError, ConnectionError):
            msg = None
        finally:
            try:
                conn.setblocking(False)
            except OSError:
                pass
        if msg is None:  # the client is gone (killed): its job goes with it, as a cold process would
            sel.unregister(conn)
            if pid in self.children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        if "signal" in msg and pid in self.children:
            try:
                os.kill(pid, int(msg["signal"]))
            except ProcessLookupError:
                pass

    def _reap(self, sel) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 255 << 8
            if not done:
                continue
            conn = self.children.pop(pid)
            try:
                sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.setblocking(True)
                conn.settimeout(5)
                send_msg(conn, {"status": status})
            except OSError:
                pass
            conn.close()

    # ------------------------------------------------------------------------------------- child

    def _child(self, conn, req, fds) -> None:
        code = 1
        try:
            code = self._child_run(conn, req, fds)
        except BaseException:  # noqa: BLE001 - nothing of the server's may run on in the child
            try:
                import traceback

                traceback.print_exc()
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)

    def _child_run(self, conn, req, fds) -> int:
        # nothing of the server's survives: its sockets, wake-up pipe, lock and signal handlers
        signal.set_wakeup_fd(-1)
        try:
            self.sel.close()
        except Exception:  # noqa: BLE001
            pass
        # detached, not just closed: a socket object collected later must not close a descriptor the job reuses
        fds_to_close = [self.wake_r, self.wake_w, self.lock_fd]
        for sock in (self.listener, conn, *self.children.values()):
            try:
                fds_to_close.append(sock.detach())
            except OSError:
                pass
        for fd in fds_to_close:
            try:
                os.close(fd)
            except OSError:
                pass
        for sig in range(1, signal.NSIG):
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass
        # as a fresh interpreter: SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ are ignored;
        # what the client's process ignored stays ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        if hasattr(signal, "SIGXFSZ"):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        for sig in req.get("ignored", []):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, req.get("mask", []))
        for target, fd in enumerate(fds):
            os.dup2(fd, target, inheritable=True)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        _new_stdio()
        os.chdir(req["cwd"])
        os.umask(req.get("umask", 0o022))
        os.environ.clear()
        os.environ.update(req["env"])
        sys.path[:] = req["path"]
        if "orig_argv" in req:
            sys.orig_argv = req["orig_argv"]
        # a fresh process seeds its generators from the OS: the children must not share the server's state
        import random

        random.seed()
        if "numpy" in sys.modules:
            try:
                sys.modules["numpy"].random.seed()
            except Exception:  # noqa: BLE001
                pass
        if "torch" in sys.modules and os.environ.get("OMP_NUM_THREADS", "").isdigit():
            try:
                sys.modules["torch"].set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
            except Exception:  # noqa: BLE001
                pass
        return run_as_main(req["module"], req["args"])


_EVENT_READ = 1  # selectors.EVENT_READ (not imported by the client)


def _new_stdio() -> None:
    """sys.stdin/stdout/stderr on descriptors 0/1/2, made as a fresh interpreter makes them."""
    import io

    unbuffered = bool(getattr(sys.__stdout__, "write_through", False))  # -u / PYTHONUNBUFFERED (in the key)
    old = (sys.__stdin__, sys.__stdout__, sys.__stderr__)

    def stream(fd, mode, like, line):
        if like is None:
            return None
        enc, errors = like.encoding, like.errors
        if mode == "r":
            raw = io.FileIO(fd, "r", closefd=False)
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=enc, errors=errors, line_buffering=line)
        raw = io.FileIO(fd, "w", closefd=False)
        buf = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(buf, encoding=enc, errors=errors, line_buffering=line, write_through=unbuffered)

    for s in old:
        try:
            s and s.flush()
        except Exception:  # noqa: BLE001
            pass
    try:
        sys.stdin = sys.__stdin__ = stream(0, "r", old[0], False)
    except OSError:
        sys.stdin = sys.__stdin__ = None
    sys.stdout = sys.__stdout__ = stream(1, "w", old[1], os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", old[2], True)


def _exit_code(exc: SystemExit) -> int:
    """The exit status `python` gives an uncaught SystemExit (printing a non-integer code)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def run_as_main(module: str, args: list[str]) -> int:
    """Run the module as `python -m` runs it, in this (forked) process, and shut down as the
    interpreter does (non-daemon threads, atexit, flush); the exit status."""
    import runpy
    import threading
    import atexit

    main = _fresh_main(args)
    interrupted = False
    try:
        runpy._run_module_as_main(module, alter_argv=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - as the interpreter: traceback, status 1
        sys.excepthook(type(exc), *_trimmed(exc))
        code, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    atexit._run_exitfuncs()
    main.__dict__.clear()  # its objects go (open files flushed and closed), as at interpreter exit
    import gc

    gc.collect()
    for s in (sys.stdout, sys.stderr):
        try:
            s and s.flush()
        except Exception:  # noqa: BLE001 - as the interpreter: a failed flush of stdout is status 120
            if s is sys.stdout:
                code = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


# --------------------------------------------------------------------------------------- management


def _servers(dirname: str):
    for name in sorted(os.listdir(dirname)):
        if name.endswith(".sock"):
            yield os.path.join(dirname, name)


def _ask(path: str, obj):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(path)
        send_msg(sock, obj)
        reply, _ = recv_msg(sock)
        return reply
    finally:
        sock.close()


def manage(action: str) -> int:
    dirname = socket_dir(create=False)
    if dirname is None:
        print("no warm servers" if action == "--status" else "no warm servers to stop")
        return 0
    found = 0
    for path in _servers(dirname):
        try:
            reply = _ask(path, {"stop": True} if action == "--stop" else {"status": True})
        except OSError:
            try:
                os.unlink(path)  # a dead server's socket
            except OSError:
                pass
            continue
        found += 1
        if action == "--status" and reply:
            import time

            print(f"{path}: pid {reply['pid']}, {reply['group']} ({reply['module']}), up "
                  f"{time.time() - reply['started']:.0f} s, {reply['served']} served, {reply['children']} running")
        elif action == "--stop":
            print(f"stopping {path}")
    if action == "--status":
        print(f"{found} warm server(s) in {dirname} (log: {os.path.join(dirname, 'server.log')})")
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(USAGE)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if argv[0] in ("--stop", "--status"):
        return manage(argv[0])
    if argv[0] == "--serve":
        dirname, key, module = argv[1:4]
        return Server(dirname, key, module).serve()
    if argv[0].startswith("-"):
        sys.stderr.write(f"unknown option {argv[0]}\n{USAGE}")
        return 2
    module, args = argv[0], argv[1:]
    if not run_warm(module, args):
        run_in_process(module, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
