# sandboxkit Python kernel driver.
#
# This program runs inside the sandbox as one long-lived python3 process per
# kernel context. The Go side (kernel.go) sends it the source of this file
# through the bootstrap (see bootstrap in kernel.go) and then speaks a JSON-lines
# protocol with it over the process's original stdin and stdout, which this
# driver moves to private file descriptors at start. File descriptors 1 and 2
# are then pipes read by a thread here, so everything the user's code and its
# child processes write is captured at the fd level, in order, and streamed.
#
# Only the standard library is used, and nothing slow is imported before the
# ready message: the context start time is part of what users feel (even
# json, which pulls in re, is imported after it).
#
# Requests (one JSON object per line, Go -> driver):
#   {"op":"run","n":COUNT,"code":SRC,"env":{K:V},"max":BYTES,"maxd":BYTES,
#    "of":PATH,"ofmax":BYTES}   (of: file that keeps the run's whole output)
# Messages (one JSON object per line, driver -> Go):
#   {"t":"ready","pid":N,"version":"3.11.2","executable":PATH}
#   {"t":"out","n":"stdout"|"stderr","d":TEXT}
#   {"t":"cut","n":"stdout"|"stderr","b":BYTES,"l":LINES}   (the middle of the
#    stream was left out here: the "out" messages after it are its end)
#   {"t":"display","data":{MIME:STR},"bin":[MIME...]}   (bin: base64 values)
#   {"t":"result","data":{...},"bin":[...]}
#   {"t":"error","ename":S,"evalue":S,"tb":[LINE...]}
#   {"t":"done","n":COUNT,"status":"ok"|"error"|"interrupted"|"exit",
#    "dout":BYTES_DROPPED_STDOUT,"derr":BYTES_DROPPED_STDERR,"ddisp":N,
#    "ofb":BYTES_IN_FILE,"ofc":BYTES_PAST_ITS_CAP,"ofe":WRITE_ERROR}
#   {"t":"bad","msg":S}        (a request could not be understood)
#
# The driver must survive anything the user's code does short of killing the
# process: every run ends with exactly one "done" message.

import builtins
import codecs
import os
import select
import signal
import sys
import threading
import types

DRIVER_FILE = "<sandboxkit-driver>"
CO_COROUTINE = 0x80
# ast.PyCF_ALLOW_TOP_LEVEL_AWAIT without importing ast at start (3.8+).
PYCF_ALLOW_TOP_LEVEL_AWAIT = 0x2000
PYCF_ONLY_AST = 0x0400
CHUNK = 65536
MAIN_THREAD = threading.get_ident()
DRIVER_PID = os.getpid()  # a child forked by the code must never speak the protocol


class _State:
    """Mutable driver state shared by the main thread and the signal handler."""

    running = False  # user code (or its result formatting) is executing
    critical = 0  # main thread is inside a protocol write; defer interrupts
    pending = False  # an interrupt arrived during a critical section
    loop = None  # persistent asyncio loop for top-level await


S = _State()

# --- private protocol fds -------------------------------------------------

_proto_in = _proto_out = _devnull = -1


def _plumb(inp=None, out=None):
    """Moves the protocol (fds 0 and 1 as the process got them) to private
    fds. A context forked from a template calls it again with the pipes of
    its own process (inp, out): the template's protocol fds are closed, so
    a context can never speak for the template."""
    global _proto_in, _proto_out, _devnull, _out_lock, DRIVER_PID
    for fd in (_proto_in, _proto_out):
        if fd >= 0:
            os.close(fd)
    if inp is None:
        _proto_in = os.dup(0)  # os.dup returns a non-inheritable fd: children never see it
        _proto_out = os.dup(1)
        _devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(_devnull, 0)  # no stdin: input() and child processes read EOF, never hang
    else:
        _proto_in, _proto_out = inp, out  # os.open's fds are non-inheritable too
    _out_lock = threading.Lock()
    DRIVER_PID = os.getpid()


_plumb()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _Critical:
    """Defers SIGINT while the main thread writes protocol data, so an
    interrupt can never cut a message in half. The interrupt is re-raised
    right after, if user code is still running."""

    def __enter__(self):
        if threading.get_ident() == MAIN_THREAD:
            S.critical += 1
            self.main = True
        else:
            self.main = False

    def __exit__(self, *exc):
        if self.main:
            S.critical -= 1
            if S.pending and S.critical == 0 and S.running and exc[0] is None:
                S.pending = False
                raise KeyboardInterrupt
        return False


_held = []  # encoded messages held back to go out with the next write (under _out_lock)


def send(obj, hold=False):
    """Writes one message. With hold, the message waits and goes out together
    with the next one (in order): a result or an error is always followed
    soon by "done", and one write instead of two saves a process wake-up on
    the Go side, a good part of a round trip."""
    if os.getpid() != DRIVER_PID:
        return
    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    data = line.encode("utf-8", "replace") + b"\n"
    with _Critical():
        with _out_lock:
            if hold:
                _held.append(data)
                return
            if _held:
                data = b"".join(_held) + data
                del _held[:]
            try:
                _write_all(_proto_out, data)
            except OSError:
                # The Go side is gone; nothing left to serve.
                os._exit(0)


# --- fd-level output capture ---------------------------------------------


class _Capture:
    """Owns the pipes behind fds 1 and 2 and forwards what arrives on them.

    A thread polls the read ends and forwards chunks as they come (streaming).
    The main thread calls drain() before it sends anything else, so that
    messages keep the order in which output was written. Both read the
    non-blocking pipes under one lock, so no byte is sent twice or out of order.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.fds = {}
        self.dec = {}
        self.writers = {}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()  # both ends non-inheritable: kept private
            os.dup2(w, fd)  # dup2 makes fd inheritable: children write here too
            self.writers[fd] = w
            os.set_blocking(r, False)
            self.fds[r] = name
        self.active = False
        self.budget = 0
        self.tailmax = 0
        self.dropped = {"stdout": 0, "stderr": 0}
        self.dlines = {"stdout": 0, "stderr": 0}
        self.tail = {"stdout": bytearray(), "stderr": bytearray()}
        self.of = None
        self.reset_decoders()
        t = threading.Thread(target=self._loop, name="sandboxkit-capture", daemon=True)
        t.start()

    def reset_decoders(self):
        for name in ("stdout", "stderr"):
            self.dec[name] = codecs.getincrementaldecoder("utf-8")("replace")

    def begin(self, budget, path=None, limit=0):
        # Code may have closed or redirected fds 0-2 (os.close(1), fd-level
        # capture libraries): put the plumbing back for every run.
        for fd, w in self.writers.items():
            os.dup2(w, fd)
        os.dup2(_devnull, 0)
        with self.lock:
            self._read_all()  # drop anything written between runs
            self.active = True
            # The first half of the budget is the head, streamed as written;
            # past it each stream keeps its last bytes as the tail (the
            # other half, shared at the end when both streams have one),
            # sent at the end after a "cut" message that counts what was left
            # out between: the end of a long output (the error, the summary)
            # is what a reader needs most.
            self.budget = budget // 2
            self.tailmax = budget - budget // 2
            self.dropped = {"stdout": 0, "stderr": 0}
            self.dlines = {"stdout": 0, "stderr": 0}
            self.tail = {"stdout": bytearray(), "stderr": bytearray()}
            self.reset_decoders()
            self.of = None
            self.of_bytes = self.of_cut = 0
            self.of_err = ""
            self.of_limit = limit if limit > 0 else 64 << 20
            if path:
                # The whole output, both streams in the order written, kept
                # where it is produced; a failure is reported, never hidden.
                try:
                    d = os.path.dirname(path)
                    if d:
                        os.makedirs(d, exist_ok=True)
                    self.of = open(path, "wb", buffering=0)
                except OSError as e:
                    self.of_err = "%s: %s" % (path, e.strerror or e)

    def end(self):
        with self.lock:
            self._read_all()
            for name in ("stdout", "stderr"):
                tail = self.dec[name].decode(b"", True)
                if tail:
                    send({"t": "out", "n": name, "d": tail})
            # Each stream kept up to the whole tail budget; when both have a
            # tail they share it.
            share = self.tailmax
            if self.tail["stdout"] and self.tail["stderr"]:
                share = self.tailmax // 2
            for name in ("stdout", "stderr"):
                t = self.tail[name]
                excess = len(t) - share
                if excess > 0:
                    self.dropped[name] += excess
                    self.dlines[name] += t.count(b"\n", 0, excess)
                    del t[:excess]
                self._send_tail(name)
            self.active = False
            if self.of is not None:
                try:
                    self.of.close()
                except OSError as e:
                    self.of_err = self.of_err or str(e)
                self.of = None
            return dict(self.dropped), {"ofb": self.of_bytes, "ofc": self.of_cut, "ofe": self.of_err}

    def _send_tail(self, name):
        t = self.tail[name]
        if not t:
            return
        if self.dropped[name] > 0:
            # Start the tail at a line (if one starts in its first quarter)
            # and never inside a character.
            skip = 0
            nl = t.find(b"\n", 0, len(t) // 4)
            if nl >= 0:
                skip = nl + 1
            else:
                while skip < len(t) and (t[skip] & 0xC0) == 0x80:
                    skip += 1
            self.dropped[name] += skip
            self.dlines[name] += t[:skip].count(b"\n")
            send({"t": "cut", "n": name, "b": self.dropped[name], "l": self.dlines[name]})
            del t[:skip]
        text = bytes(t).decode("utf-8", "replace")
        if text:
            send({"t": "out", "n": name, "d": text})

    def drain(self):
        with _Critical():
            with self.lock:
                self._read_all()

    def _loop(self):
        # SIGINT must reach the main thread, where the user's code runs; a
        # thread that took it would leave a blocking call there unwoken.
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
        poller = select.poll()
        for r in self.fds:
            poller.register(r, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            with self.lock:
                for fd, _ in events:
                    self._read_one(fd)

    def _read_all(self):
        # Everything written before this call is in the pipe buffer (64 KiB
        # on Linux), so a few chunks reach it; the bound keeps a writer that
        # never stops (`yes` in the background) from holding us here.
        if os.getpid() != DRIVER_PID:
            return  # a forked child must leave the parent's output alone
        for fd in self.fds:
            for _ in range(4):
                if not self._read_one(fd):
                    break

    def _read_one(self, fd):
        try:
            data = os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            return False
        self._emit(self.fds[fd], data)
        return True

    def _emit(self, name, data):
        if not self.active:
            return  # output between runs has no run to belong to
        if self.of is not None:
            self._capture(data)
        if self.budget > 0:
            head, data = data[: self.budget], data[self.budget :]
            self.budget -= len(head)
            text = self.dec[name].decode(head)
            if text:
                send({"t": "out", "n": name, "d": text})
        if data:
            t = self.tail[name]
            t += data
            excess = len(t) - self.tailmax
            if excess > 0:
                self.dropped[name] += excess
                self.dlines[name] += t.count(b"\n", 0, excess)
                del t[:excess]

    def _capture(self, data):
        room = self.of_limit - self.of_bytes
        keep = data[:room] if room < len(data) else data
        self.of_cut += len(data) - len(keep)
        if not keep:
            return
        try:
            self.of.write(keep)
            self.of_bytes += len(keep)
        except OSError as e:
            # A full disk or the quota: the file holds what was written.
            self.of_err = str(e)
            self.of_cut += len(keep)
            try:
                self.of.close()
            except OSError:
                pass
            self.of = None


def _make_streams():
    # Unbuffered text streams straight onto fds 1 and 2 (what python -u does),
    # so print() interleaves correctly with output of child processes.
    import io

    def mk(fd):
        return io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            write_through=True,
        )

    stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    return mk(1), mk(2), stdin


# --- rich output ------------------------------------------------------------

_REPR_METHODS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
)
_BINARY = ("image/png", "image/jpeg", "image/gif", "application/pdf")
_PLAIN_TYPES = (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset, range)


class _Budget:
    display = 0
    dropped = 0


DB = _Budget()


def _encode_value(mime, value, data, binary):
    if mime in _BINARY:
        import base64

        if isinstance(value, str):
            data[mime] = value  # already base64 (the Jupyter convention for str images)
        else:
            data[mime] = base64.b64encode(bytes(value)).decode("ascii")
        binary.append(mime)
    elif mime == "application/json" and not isinstance(value, str):
        data[mime] = json.dumps(value, default=repr)
    else:
        data[mime] = str(value)


def _warn_repr(obj, meth, exc):
    try:
        sys.stderr.write(
            "[sandboxkit] %s.%s() raised %s: %s; that representation was skipped\n"
            % (type(obj).__name__, meth, type(exc).__name__, exc)
        )
    except Exception:
        pass


def _method(obj, name):
    """Returns obj's callable attribute name, or None; a __getattr__ that
    raises anything is taken as "no such method", as notebooks do."""
    try:
        f = getattr(obj, name, None)
    except KeyboardInterrupt:
        raise
    except Exception:
        return None
    return f if callable(f) else None


def mime_bundle(obj, limit):
    """Returns (data, binary_mimes) for obj: text/plain from repr() (errors
    propagate: a broken __repr__ is the user's error) plus every rich
    representation the object offers (errors there are warnings)."""
    text = repr(obj)
    if len(text) > limit:
        text = text[:limit] + "\n[sandboxkit: repr truncated, %d characters dropped]" % (len(text) - limit)
    data = {"text/plain": text}
    binary = []
    if isinstance(obj, _PLAIN_TYPES) or isinstance(obj, type) or obj is None:
        return data, binary
    mb = _method(obj, "_repr_mimebundle_")
    if mb is not None:
        try:
            got = mb(include=None, exclude=None)
            if isinstance(got, tuple):
                got = got[0]
            if isinstance(got, dict):
                for mime, value in got.items():
                    if mime != "text/plain" and value is not None:
                        _encode_value(str(mime), value, data, binary)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            _warn_repr(obj, "_repr_mimebundle_", e)
    for meth, mime in _REPR_METHODS:
        if mime in data:
            continue
        f = _method(obj, meth)
        if f is None:
            continue
        try:
            value = f()
        except KeyboardInterrupt:
            raise
        except Exception as e:
            _warn_repr(obj, meth, e)
            continue
        if isinstance(value, tuple):
            value = value[0] if value else None
        if value is None:
            continue
        try:
            _encode_value(mime, value, data, binary)
        except Exception as e:
            _warn_repr(obj, meth, e)
    return data, binary


def _send_bundle(kind, data, binary):
    size = sum(len(v) for v in data.values())
    if size > DB.display:
        DB.dropped += 1
        return
    DB.display -= size
    CAP.drain()  # everything printed before this output goes first
    # The result is held: the next message, at the latest "done", takes it along.
    send({"t": kind, "data": data, "bin": binary}, hold=kind == "result")


def display(*objs, **kwargs):
    """Shows each object as rich output (like IPython's display()).
    Keyword raw=True takes each object as a ready {mime: data} dict."""
    raw = kwargs.get("raw", False)
    for obj in objs:
        if raw and isinstance(obj, dict):
            data, binary = {}, []
            for mime, value in obj.items():
                _encode_value(str(mime), value, data, binary)
            if "text/plain" not in data:
                data["text/plain"] = ""
        else:
            data, binary = mime_bundle(obj, _Run.max_repr)
        _send_bundle("display", data, binary)


def _flush_figures():
    """Sends every open matplotlib figure as PNG and closes it (what the
    notebook inline backend does on plt.show() and at the end of a cell)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        import io

        nums = plt.get_fignums()
        for num in nums:
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            display({"image/png": buf.getvalue(), "text/plain": repr(fig)}, raw=True)
        plt.close("all")
    except KeyboardInterrupt:
        raise
    except Exception as e:
        _warn_repr(plt, "show", e)


def _plt_show(*args, **kwargs):
    _flush_figures()


class _PostImportFinder:
    """Patches modules right after they are first imported, without importing
    them at driver start: pyplot.show() captures figures, and IPython's
    display() (when IPython happens to be installed) routes to ours."""

    def __init__(self, patches):
        self.patches = patches
        self.busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches or name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.patches[name])
        return spec


class _PatchingLoader:
    def __init__(self, inner, patch):
        self.inner = inner
        self.patch = patch

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            self.patch(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _patch_pyplot(mod):
    mod.show = _plt_show


def _patch_ipython_display(mod):
    mod.display = display


def _patch_getpass(mod):
    # getpass reads /dev/tty, which would wait forever for a person.
    mod.getpass = _input


# --- user namespace and helpers -------------------------------------------


class StdinNotImplementedError(NotImplementedError):
    """Raised by input(): a sandbox kernel has no interactive stdin."""


class UsageError(Exception):
    """Raised for notebook magics this kernel does not support."""


def _input(prompt="", stream=None):
    raise StdinNotImplementedError(
        "input() and getpass() are not available: this Python kernel has no stdin. "
        "Put the data in the code or read it from a file."
    )


def _shell_cmd():
    return "/bin/bash" if os.path.exists("/bin/bash") else None


def _sbk_shell(cmd):
    import subprocess

    subprocess.run(cmd, shell=True, executable=_shell_cmd())


def _sbk_getoutput(cmd):
    import subprocess

    done = subprocess.run(cmd, shell=True, executable=_shell_cmd(), stdout=subprocess.PIPE)
    return done.stdout.decode("utf-8", "replace").splitlines()


def _sbk_magic(name, args):
    import shlex
    import subprocess

    if name == "pip":
        subprocess.run([sys.executable, "-m", "pip"] + shlex.split(args))
        import importlib

        importlib.invalidate_caches()
    elif name == "cd":
        target = os.path.expanduser(args.strip() or "~")
        os.chdir(target)
        print(os.getcwd())
    elif name == "pwd":
        return os.getcwd()
    elif name == "env":
        if "=" in args:
            k, v = args.split("=", 1)
            os.environ[k.strip()] = v.strip()
        elif args.strip():
            return os.environ.get(args.strip())
        else:
            return dict(os.environ)
    elif name == "matplotlib":
        pass  # figures are always captured inline; the backend is forced to Agg
    elif name == "time":
        import time

        ns = sys.modules["__main__"].__dict__
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            try:
                code = compile(args, "<%time>", "eval", dont_inherit=True)
            except SyntaxError:
                code = compile(args, "<%time>", "exec", dont_inherit=True)
            return eval(code, ns)
        finally:
            _time_report(time.perf_counter() - t0, time.process_time() - c0)
    elif name == "timeit":
        import timeit

        timer = timeit.Timer(args, globals=sys.modules["__main__"].__dict__)
        number, _ = timer.autorange()
        best = min(timer.repeat(repeat=3, number=number)) / number
        print("%s per loop (best of 3 runs, %d loops each)" % (_fmt_time(best), number))
    else:
        raise UsageError(
            "%%%s is not supported by this kernel; supported: %s, and !shell lines" % (name, _SUPPORTED_MAGICS)
        )


_SUPPORTED_MAGICS = "%pip, %cd, %pwd, %env, %time, %timeit, %matplotlib, %%bash, %%sh, %%time, %%writefile"


def _fmt_time(seconds):
    if seconds >= 1:
        return "%.2f s" % seconds
    if seconds >= 1e-3:
        return "%.2f ms" % (seconds * 1e3)
    if seconds >= 1e-6:
        return "%.2f \u00b5s" % (seconds * 1e6)
    return "%.0f ns" % (seconds * 1e9)


def _time_report(wall, cpu):
    print("CPU times: %s\nWall time: %s" % (_fmt_time(cpu), _fmt_time(wall)))


def _cell_magic(first, body):
    import subprocess

    parts = first[2:].split()
    name = parts[0] if parts else ""
    args = parts[1:]
    if name in ("bash", "sh"):
        subprocess.run([_shell_cmd() or "/bin/sh", "-c", body] if name == "bash" else ["/bin/sh", "-c", body])
        return
    if name == "writefile":
        append = False
        if args and args[0] in ("-a", "--append"):
            append = True
            args = args[1:]
        if not args:
            raise UsageError("%%writefile needs a file name")
        path = os.path.expanduser(" ".join(args))
        with open(path, "a" if append else "w") as f:
            f.write(body)
        print("Appending to %s" % path if append else "Writing %s" % path)
        return
    raise UsageError("%%%%%s is not supported by this kernel; supported: %s" % (name, _SUPPORTED_MAGICS))


def transform(code):
    """Rewrites notebook-only lines into Python: `!cmd` runs a shell command,
    `%magic args` calls a line magic. Only used when the code does not parse
    as Python, so valid Python is never rewritten."""
    out = []
    for line in code.splitlines(True):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        body = stripped.rstrip("\r\n")
        target, eq, rest = body.partition("=")
        if eq and rest.lstrip().startswith("!") and target.strip().isidentifier():
            # `files = !ls`: the output's lines as a list, as in IPython
            out.append("%s%s = _sbk_getoutput(%r)\n" % (indent, target.strip(), rest.lstrip()[1:]))
        elif body.startswith("!"):
            out.append("%s_sbk_shell(%r)\n" % (indent, body[1:]))
        elif body.startswith("%") and not body.startswith("%%") and len(body) > 1 and body[1].isalpha():
            name, _, args = body[1:].partition(" ")
            out.append("%s_sbk_magic(%r, %r)\n" % (indent, name, args))
        else:
            out.append(line)
    return "".join(out)


def _new_namespace():
    mod = types.ModuleType("__main__")
    mod.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = mod  # so pickle finds classes defined in cells
    return mod.__dict__


# --- tracebacks ---------------------------------------------------------


def _strip_driver(te):
    """Removes driver frames from a TracebackException and its chain, so
    users see only their own lines."""
    import traceback

    seen = set()
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != DRIVER_FILE])
        if te.__cause__ is not None:
            _strip_driver(te.__cause__)
        te = te.__context__


def format_error(exc):
    import traceback

    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _strip_driver(te)
    lines = []
    for chunk in te.format():
        lines.extend(chunk.rstrip("\n").split("\n"))
    if isinstance(exc, SystemExit):
        # Like an exit status: sys.exit() and exit() give "", not "None".
        value = "" if exc.code is None else str(exc.code)
    else:
        try:
            value = str(exc)
        except Exception:
            value = "<exception str() failed>"
    return {"t": "error", "ename": type(exc).__name__, "evalue": value, "tb": lines}


# --- running code -------------------------------------------------------


class _Run:
    max_repr = 1 << 20


def _suppressed(src, node):
    """True when the final expression is followed by ';' (notebooks then
    show no result). Offsets from ast are UTF-8 byte offsets."""
    lines = src.split("\n")
    if node.end_lineno is None or node.end_lineno > len(lines):
        return False
    rest = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset :].decode("utf-8", "replace")
    rest += "\n".join(lines[node.end_lineno :])
    return rest.lstrip().startswith(";")


def _evaluate(codeobj, ns):
    if codeobj.co_flags & CO_COROUTINE:
        import asyncio

        if S.loop is None or S.loop.is_closed():
            S.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(S.loop)
        task = S.loop.create_task(eval(codeobj, ns))
        try:
            return S.loop.run_until_complete(task)
        except BaseException:
            # Interrupted (or failed): never leave the cell's coroutine
            # pending, or it would resume during the next run.
            if not task.done():
                task.cancel()
                try:
                    S.loop.run_until_complete(task)
                except BaseException:
                    pass
            raise
    return eval(codeobj, ns)


def _execute(req, ns):
    import linecache

    count = req.get("n", 0)
    code = req.get("code", "")
    fname = "<cell %d>" % count
    if code.startswith("%%"):
        first, _, body = code.partition("\n")
        first = first.rstrip("\r")
        if first.split()[0] == "%%time":
            import time

            t0, c0 = time.perf_counter(), time.process_time()
            try:
                _execute(dict(req, code=body), ns)
            finally:
                _time_report(time.perf_counter() - t0, time.process_time() - c0)
            return
        _cell_magic(first, body)
        return
    src = code
    flags = PYCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = compile(src, fname, "exec", PYCF_ONLY_AST | flags, dont_inherit=True)
    except SyntaxError as first_error:
        src = transform(code)
        if src == code:
            raise
        try:
            tree = compile(src, fname, "exec", PYCF_ONLY_AST | flags, dont_inherit=True)
        except SyntaxError:
            raise first_error from None
    linecache.cache[fname] = (len(src), None, [l + "\n" for l in src.split("\n")], fname)
    import ast

    # The final expression becomes a call of a hook instead of a separate
    # eval, so that the cell is one code object: with top-level await, all
    # of it runs inside the event loop.
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _suppressed(src, tree.body[-1]):
        last = tree.body[-1]
        hook = ast.Name(id="_sbk_result", ctx=ast.Load())
        call = ast.Call(func=hook, args=[last.value], keywords=[])
        ast.copy_location(hook, last.value)
        ast.copy_location(call, last.value)
        last.value = call
    _Run.value = _NOTHING
    _evaluate(compile(tree, fname, "exec", flags, dont_inherit=True), ns)
    value = _Run.value
    _Run.value = _NOTHING
    if value is not _NOTHING and value is not None:
        ns["_"] = value
        data, binary = mime_bundle(value, _Run.max_repr)
        _send_bundle("result", data, binary)


_NOTHING = object()


def _sbk_result(value):
    _Run.value = value


def _apply_env(env):
    saved = {}
    for k, v in env.items():
        k, v = str(k), str(v)
        if k not in saved:
            saved[k] = os.environ.get(k)
        os.environ[k] = v
    return saved


def _restore_env(saved):
    for k, old in saved.items():
        if old is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = old


def _sigint(signum, frame):
    if S.running:
        if S.critical:
            S.pending = True
            return
        raise KeyboardInterrupt


def run_cell(req, ns, streams):
    status = "ok"
    err = None
    saved_env = {}
    budget = int(req.get("max", 1 << 20))
    DB.display = int(req.get("maxd", 32 << 20))
    DB.dropped = 0
    _Run.max_repr = max(budget, 1024)
    CAP.begin(budget, req.get("of"), int(req.get("ofmax", 0)))
    # Undo what a previous cell may have changed in the plumbing (exit()
    # closes sys.stdin; code may replace or close sys.stdout).
    if any(s.closed for s in streams):
        streams[:] = _make_streams()
    sys.stdout, sys.stderr, sys.stdin = streams
    if signal.getsignal(signal.SIGINT) is not _sigint:
        signal.signal(signal.SIGINT, _sigint)  # the code replaced it
    S.pending = False
    try:
        try:
            S.running = True
            saved_env = _apply_env(req.get("env") or {})
            _execute(req, ns)
        except KeyboardInterrupt as e:
            status, err = "interrupted", e
        except SystemExit as e:
            status, err = "exit", e
        except BaseException as e:
            status, err = "error", e
        if status != "interrupted":
            # Figures still open are shown, also after an error (as the
            # notebook's inline backend does).
            try:
                _flush_figures()
            except KeyboardInterrupt as e:
                status, err = "interrupted", e
    except KeyboardInterrupt as e:
        # An interrupt that landed inside one of the handlers above.
        status, err = "interrupted", e
    finally:
        S.running = False
        if os.getpid() != DRIVER_PID:
            # A child of os.fork() that ran off the end of the cell: it must
            # not go on to read the parent's requests.
            os._exit(1 if err is not None else 0)
    _restore_env(saved_env)
    if err is not None:
        CAP.drain()
        try:
            msg = format_error(err)
        except Exception as e:
            msg = {"t": "error", "ename": type(err).__name__, "evalue": "", "tb": ["(traceback failed: %r)" % e]}
        send(msg, hold=True)
        err = None
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    dropped, of = CAP.end()
    done = {
        "t": "done",
        "n": req.get("n", 0),
        "status": status,
        "dout": dropped["stdout"],
        "derr": dropped["stderr"],
        "ddisp": DB.dropped,
    }
    done.update(of)
    send(done)


_hooked = False


def _install_hooks():
    """Sets up what must be in place before any module is imported (a
    template imports the user's modules before it forks contexts)."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    os.environ["MPLBACKEND"] = "Agg"  # never a GUI backend: there is no display
    builtins.input = _input
    builtins.display = display
    builtins._sbk_shell = _sbk_shell
    builtins._sbk_getoutput = _sbk_getoutput
    builtins._sbk_magic = _sbk_magic
    builtins._sbk_result = _sbk_result
    sys.meta_path.insert(
        0,
        _PostImportFinder(
            {
                "matplotlib.pyplot": _patch_pyplot,
                "IPython.display": _patch_ipython_display,
                "IPython.core.display_functions": _patch_ipython_display,
                "IPython.core.display": _patch_ipython_display,
                "getpass": _patch_getpass,
            }
        ),
    )


def _import_all(mods):
    """Imports mods in order; returns None, or the "importerr" message for
    the first one that fails."""
    import importlib

    for m in mods:
        try:
            importlib.import_module(m)
        except BaseException as e:
            return {"t": "importerr", "mod": m, "ename": type(e).__name__, "evalue": str(e)[:2000]}
    return None


def _ready_line():
    exe = "".join(c if " " <= c and c not in '"\\' else "?" for c in sys.executable or "")
    ready = '{"t":"ready","pid":%d,"version":"%d.%d.%d","executable":"%s"}\n' % (
        (os.getpid(),) + tuple(sys.version_info[:3]) + (exe,)
    )
    return ready.encode("utf-8", "replace")


def _prepare(bind=()):
    """Sets up everything a context needs before it serves runs: output
    capture, streams, namespace (with the top-level names of the modules in
    bind), interrupt handler. A template's spare does it ahead of time."""
    global CAP
    _install_hooks()
    CAP = _Capture()
    streams = list(_make_streams())
    sys.stdout, sys.stderr, sys.stdin = streams
    ns = _new_namespace()
    for m in bind:
        top = m.split(".")[0]
        if top in sys.modules:
            ns[top] = sys.modules[top]
    signal.signal(signal.SIGINT, _sigint)
    return streams, ns


def main(preload=()):
    """A context started afresh; preload: modules to import before ready."""
    global json
    _install_hooks()
    if preload:
        import json

        err = _import_all(preload)
        if err is not None:
            send(err)
            os._exit(3)
    _serve(*_prepare(preload))


def _serve(streams, ns):
    """Says ready and serves runs until Go closes the protocol."""
    global json
    fin = os.fdopen(_proto_in, "rb")
    _write_all(_proto_out, _ready_line())
    import json  # while Go prepares the first request
    while True:
        try:
            line = fin.readline()
        except KeyboardInterrupt:
            continue  # a late interrupt for a run that already ended
        if not line:
            os._exit(0)  # Go closed our stdin: the context is gone
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or req.get("op") != "run":
                raise ValueError("unknown request")
        except KeyboardInterrupt:
            continue
        except Exception as e:
            send({"t": "bad", "msg": "bad request: %s" % e})
            continue
        try:
            run_cell(req, ns, streams)
        except KeyboardInterrupt:
            # Interrupt after the run's bookkeeping; the run still needs its end.
            send({"t": "done", "n": req.get("n", 0), "status": "interrupted", "dout": 0, "derr": 0, "ddisp": 0})
        except BaseException as e:
            send({"t": "error", "ename": "DriverError", "evalue": repr(e), "tb": []})
            send({"t": "done", "n": req.get("n", 0), "status": "error", "dout": 0, "derr": 0, "ddisp": 0})


# --- template: contexts forked from an interpreter that already imported ---
#
# Started with the arguments "template MOD...", the driver imports the
# modules once and then forks contexts on request instead of serving runs
# (see template.go). Requests (Go -> template, one JSON object per line):
#   {"op":"fork","n":ID,"stub":PID}   hand a context to the process PID,
#                                     which the agent started for it
#   {"op":"signal","pid":CHILD,"sig":N}   signal a context's process group
# Messages (template -> Go):
#   {"t":"ready",...}                 as a context's, once the imports are done
#   {"t":"importerr","mod":M,"ename":S,"evalue":S}   an import failed (exits)
#   {"t":"forked","n":ID,"pid":CHILD} or {"t":"forked","n":ID,"msg":WHY}
#   {"t":"exit","pid":CHILD,"code":N} a context exited (128+signal if killed)
#
# The template keeps one child forked ahead, the spare: it has reseeded its
# generators and set up its output capture, namespace and handlers, and
# waits on a pipe for the PID of the process it will stand in for. A fork
# request hands the spare over (so the fork is not on the request's path)
# and forks the next spare after replying. The template itself holds no
# threads when it forks (each child starts its own), runs no user code, and
# reaps its children.

MAX_CHILDREN = 64  # live contexts per template; Go's own bound is lower
SPARE_DELAY_MS = 20


def _watch(pidfd):
    """Kills this context with its process group once the process it stands
    in for is gone (a kill of that process's command, the agent's or an
    ExecProc's, that did not reach this one directly)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    select.select([pidfd], [], [])
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def _reseed():
    # A fork copies every generator's state: reseed the ones all contexts
    # share from OS entropy, so that two contexts never draw the same
    # numbers. (random reseeds itself after fork too, via
    # os.register_at_fork; numpy's legacy global RandomState does not.)
    import random

    random.seed()
    nr = sys.modules.get("numpy.random")
    if nr is not None:
        try:
            nr.seed()
        except Exception:
            pass


def _adopt(stub):
    """Takes over the stdin and stdout of the agent-started process stub
    (its pipes to Go) as this context's protocol."""
    # The agent kills a command's processes by the tag it gave the command
    # (the soft RLIMIT_RTTIME; see the agent's tags.go): take the stub's, so
    # that killing the stub's command kills this context and what it starts.
    try:
        import resource

        soft = resource.prlimit(stub, resource.RLIMIT_RTTIME)[0]
        hard = resource.getrlimit(resource.RLIMIT_RTTIME)[1]
        if hard == resource.RLIM_INFINITY or soft <= hard:
            resource.setrlimit(resource.RLIMIT_RTTIME, (soft, hard))
    except (OSError, ValueError, AttributeError):
        pass
    sfd = os.pidfd_open(stub)
    # /proc/PID/fd reopens the stub's pipes: no unix socket is needed (the
    # Landlock tier has none).
    inp = os.open("/proc/%d/fd/0" % stub, os.O_RDONLY)
    out = os.open("/proc/%d/fd/1" % stub, os.O_WRONLY)
    _plumb(inp, out)  # closes the template's protocol fds
    threading.Thread(target=_watch, args=(sfd,), name="sandboxkit-watch", daemon=True).start()


def _spare(r, kids, mods):
    """Runs in a freshly forked child: prepares a context, then waits for
    the PID of the process it stands in for and serves runs."""
    global _proto_in, _proto_out
    os.setpgid(0, 0)  # its own group, as a context started afresh has
    # The template's protocol pipes and the other contexts' pidfds: a
    # context must never hold them (it could speak for the template).
    for fd in (_proto_in, _proto_out):
        os.close(fd)
    _proto_in = _proto_out = -1
    for cfd, sfd in kids.values():
        os.close(cfd)
        os.close(sfd)
    _reseed()
    streams, ns = _prepare(mods)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(r, 32)
        if not chunk:
            os._exit(0)  # the template is gone
        line += chunk
    os.close(r)
    try:
        _adopt(int(line))
    except Exception as e:
        # Say why where Go reads (when the protocol fds were reached): a
        # thread that cannot start at the process limit, a stand-in that
        # died before its pipes could be opened.
        if _proto_out >= 0:
            send({"t": "fatal", "msg": "the forked context could not take over its process: %s" % e})
        os._exit(70)
    _serve(streams, ns)


def _fork_spare(kids, mods):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            _spare(r, kids, mods)
        finally:
            os._exit(70)
    os.close(r)
    try:
        os.setpgid(pid, pid)  # also here: a signal may come before the child runs
    except OSError:
        pass
    return pid, os.pidfd_open(pid), w


def _exit_code(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class _Template:
    def __init__(self, mods):
        self.mods = mods
        self.kids = {}  # pid -> (its pidfd, its stub's pidfd)
        self.byfd = {}  # pidfd -> pid, for the kids and the spare
        self.spare = None  # (pid, pidfd, write end of its pipe)
        self.delay = SPARE_DELAY_MS  # ms of quiet before the next spare; None: none
        self.poller = select.poll()

    def new_spare(self):
        """Forks the spare if there is none; returns why it could not."""
        if self.spare is not None:
            return None
        if len(self.kids) >= MAX_CHILDREN:
            self.delay = None  # until a context exits
            return "the template has %d live contexts" % len(self.kids)
        try:
            self.spare = _fork_spare(self.kids, self.mods)
        except OSError as e:  # EAGAIN: the sandbox's process limit
            self.delay = 1000  # try again later, not in a loop
            return "fork: %s" % (e.strerror or e)
        self.delay = SPARE_DELAY_MS
        self.byfd[self.spare[1]] = self.spare[0]
        self.poller.register(self.spare[1], select.POLLIN)
        return None

    def hand_over(self, stub):
        """Gives the spare the stub's PID; returns the spare's pid, or None
        if it died meanwhile."""
        pid, cfd, w = self.spare
        self.spare = None
        try:
            os.write(w, b"%d\n" % stub)
        except OSError:
            return None  # its pidfd reports the death: reap() collects it
        finally:
            os.close(w)
        return pid

    def request(self, line):
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "fork":
                n, stub = int(req["n"]), int(req["stub"])
            elif op == "signal":
                pid, sig = int(req["pid"]), int(req["sig"])
            else:
                raise ValueError("unknown op %r" % op)
        except Exception as e:
            send({"t": "bad", "msg": "bad template request: %s" % e})
            return
        if op == "signal":
            if pid in self.kids:  # only its own live (or unreaped) children
                try:
                    os.killpg(pid, sig)
                except OSError:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            return
        if len(self.kids) >= MAX_CHILDREN:
            send({"t": "forked", "n": n, "msg": "the template has %d live contexts" % len(self.kids)})
            return
        try:
            sfd = os.pidfd_open(stub)
        except OSError as e:
            send({"t": "forked", "n": n, "msg": "process %d: %s" % (stub, e.strerror or e)})
            return
        pid = None
        if self.spare is not None:
            cfd = self.spare[1]
            pid = self.hand_over(stub)
        if pid is None:  # no spare, or it died: fork one for this request
            why = self.new_spare()
            if why is not None:
                os.close(sfd)
                send({"t": "forked", "n": n, "msg": why})
                return
            cfd = self.spare[1]
            pid = self.hand_over(stub)
            if pid is None:
                os.close(sfd)
                send({"t": "forked", "n": n, "msg": "the forked child died at once"})
                return
        self.kids[pid] = (cfd, sfd)
        send({"t": "forked", "n": n, "pid": pid})
        # The next spare is forked once the template has been idle for a
        # moment (serve), so that its fork does not compete for the CPU with
        # the context that was just handed over while that one gets ready.

    def reap(self, cfd):
        pid = self.byfd.pop(cfd)
        self.poller.unregister(cfd)
        _, status = os.waitpid(pid, 0)
        os.close(cfd)
        if pid not in self.kids:
            if self.spare is not None and self.spare[0] == pid:
                os.close(self.spare[2])
                self.spare = None
            return  # a spare: no context had it yet
        _, sfd = self.kids.pop(pid)
        if self.delay is None:
            self.delay = SPARE_DELAY_MS  # below MAX_CHILDREN again
        send({"t": "exit", "pid": pid, "code": _exit_code(status)})
        try:
            # The agent-started process only stood for the context: it
            # ends with it, which ends the context's streams on the Go side.
            signal.pidfd_send_signal(sfd, signal.SIGKILL)
        except OSError:
            pass
        os.close(sfd)

    def serve(self):
        self.poller.register(_proto_in, select.POLLIN)
        self.new_spare()
        buf = b""
        while True:
            try:
                # Idle with no spare (one was handed over, or died): fork
                # the next after SPARE_DELAY_MS of quiet.
                events = self.poller.poll(None if self.spare is not None else self.delay)
            except InterruptedError:
                continue
            if not events:
                self.new_spare()
                continue
            for fd, _ in events:
                if fd != _proto_in:
                    self.reap(fd)
                    continue
                data = os.read(_proto_in, CHUNK)
                if not data:
                    os._exit(0)  # Go closed our stdin: the template is done
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.request(line)
                if len(buf) > CHUNK:
                    buf = b""  # not a request


def template_main(mods):
    global json
    import json

    if not hasattr(os, "pidfd_open"):
        send({"t": "fatal", "msg": "forked contexts need Python >= 3.9 on Linux >= 5.3 (os.pidfd_open); this is %s" % sys.version.split()[0]})
        os._exit(3)
    os.dup2(_devnull, 1)  # what imports print must not reach the protocol
    os.dup2(_devnull, 2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # contexts install their own handler
    _install_hooks()
    import resource  # what every child needs at once
    import random

    err = _import_all(mods)
    if err is not None:
        send(err)
        os._exit(3)
    _write_all(_proto_out, _ready_line())
    _Template(mods).serve()


# The arguments after `python -c BOOTSTRAP`: none (a context), "imports
# MOD..." (a context that imports them before ready) or "template MOD...".
_args, sys.argv[1:] = sys.argv[1:], []
if _args[:1] == ["template"]:
    template_main(_args[1:])
else:
    main(preload=_args[1:])
