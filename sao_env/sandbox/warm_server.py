"""The inside of a warm interpreter: a stdlib-only server that runs each request in a fork of itself.

``sao_env.sandbox.warm.WarmInterpreter`` copies this file into a fresh folder and starts it in the
sandbox (``python [-I -S] warm_server.py``); the package never imports it. It imports the modules it
is told to preload once, then serves one request at a time: each runs in a forked child, which
starts from the same clean state (the preloaded modules, nothing a previous request did), gets
its own process group, CPU-time limit, working directory, environment, stdin ``/dev/null`` and
stdout/stderr pipes, and runs a script (``python FILE ARGS``) or a module (``python -m MODULE ARGS``)
as ``__main__``. The server enforces the wall clock, keeps the first ``output_bytes`` of each stream
and a short tail, then kills every other process of the sandbox (``kill(-1)``: its PID namespace
holds nothing else) and empties ``/tmp`` and ``/dev/shm``, so no request sees another's leftovers.
The server makes itself non-dumpable, so a child (same uid) can neither trace it nor open its
file descriptors; a child that kills it ends the server, which the host reports and replaces.

Protocol, one JSON object per line: the host sends the setup ``{"preload": [...], "library": DIR,
"output_bytes": N}``, the server answers ``{"ready": true}`` (or ``{"error": "..."}``); then per
request ``{"argv": [...], "cwd": DIR, "timeout_s": T, "cpu_s": N, "env": {...}}`` is answered by
``{"returncode": int|null, "timed_out": bool, "stdout": [head, tail, total], "stderr": [...]}``
(head and tail base64).
"""

import base64
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import sys
import time

TAIL = 4096
EXIT_GRACE_S = 0.5
"""After the child exits, how long its pipes may stay open (held by a leftover grandchild)."""
SCRATCH = ("/tmp", "/dev/shm")

_BASE_PATH = list(sys.path)
_SAFE_PATH = bool(getattr(sys.flags, "safe_path", False))
if not _SAFE_PATH and _BASE_PATH:
    _BASE_PATH = _BASE_PATH[1:]  # the server's own folder, which a fresh interpreter would not have


def _set_dumpable(value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, int(value), 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


class Stream:
    """The first ``limit`` bytes of a pipe, its last ``TAIL`` bytes and its length."""

    def __init__(self, limit):
        self.limit, self.head, self.tail, self.total = limit, bytearray(), b"", 0

    def feed(self, data):
        self.total += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data)[-TAIL:]

    def encode(self):
        return [base64.b64encode(bytes(self.head)).decode(), base64.b64encode(self.tail).decode(), self.total]


def _exit_status(exc):
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


def _child(request, out_w, err_w):
    """Runs in the forked child: never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)
        cpu = int(request["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        _set_dumpable(True)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        argv = list(request["argv"])
        compiled = True
        try:
            if argv[0] == "-m":
                import runpy

                sys.argv = ["-m", *argv[2:]]
                sys.path[:] = ([] if _SAFE_PATH else [os.getcwd()]) + _BASE_PATH
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                import types

                path = argv[0]
                sys.argv = argv
                sys.path[:] = ([] if _SAFE_PATH else [os.path.dirname(os.path.abspath(path))]) + _BASE_PATH
                with open(path, "rb") as handle:
                    source = handle.read()
                compiled = False
                code = compile(source, path, "exec")
                compiled = True
                main = types.ModuleType("__main__")
                main.__file__ = path
                main.__cached__ = None
                sys.modules["__main__"] = main
                exec(code, main.__dict__)
            status = 0
        except SystemExit as exc:
            status = _exit_status(exc)
        except BaseException as exc:  # noqa: BLE001 - printed as the interpreter prints an uncaught one
            # without this file's frame: a script's syntax error has no traceback, a runtime error starts in it
            tb = None if argv[0] != "-m" and not compiled else exc.__traceback__.tb_next
            sys.excepthook(type(exc), exc, tb)
            status = 1
        threading = sys.modules.get("threading")
        if threading is not None and hasattr(threading, "_shutdown"):
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                status = status or 120  # what the interpreter returns when flushing stdout fails
    finally:
        os._exit(status)


def _others():
    """Pids of this sandbox other than its init (1) and the server."""
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, me)]


def _sweep(child):
    """Kill the child's process group and every other process of the sandbox; reap them."""
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 5
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not _others() or time.monotonic() > deadline:
            return


def _clear_scratch(keep):
    """Empty /tmp and /dev/shm, except the host's folders bound there (and their parents)."""
    for folder in SCRATCH:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(folder, name)
            if any(k == path or k.startswith(path + "/") for k in keep):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def serve_one(request, limit, keep):
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    child = os.fork()
    if child == 0:
        _child(request, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    streams = {out_r: Stream(limit), err_r: Stream(limit)}
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    deadline = started + float(request["timeout_s"])
    timed_out, status, exited_at = False, None, None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                break
            if status is None:
                pid, wait_status = os.waitpid(child, os.WNOHANG)
                if pid:
                    status, exited_at = wait_status, now
            elif now - exited_at > EXIT_GRACE_S:
                break
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                data = os.read(key.fd, 1 << 16)
                if data:
                    streams[key.fd].feed(data)
                else:
                    selector.unregister(key.fd)
        while status is None and time.monotonic() < deadline:
            pid, wait_status = os.waitpid(child, os.WNOHANG)
            if pid:
                status = wait_status
            else:
                time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
        timed_out = status is None
    finally:
        selector.close()
        os.close(out_r)
        os.close(err_r)
        _sweep(child)
        _clear_scratch(keep)
    returncode = None if timed_out else os.waitstatus_to_exitcode(status)
    return {"returncode": returncode, "timed_out": timed_out,
            "stdout": streams[out_r].encode(), "stderr": streams[err_r].encode()}


def main():
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    _set_dumpable(False)

    def reply(obj):
        replies.write(json.dumps(obj).encode() + b"\n")
        replies.flush()

    setup = json.loads(requests.readline() or b"{}")
    if os.getpid() == 1 or not os.path.isdir("/proc/1") or _proc_name(1) != "bwrap":
        reply({"error": "the warm server runs only as a child of bubblewrap's init (its own PID namespace)"})
        return
    library = setup.get("library")
    try:
        if library:
            sys.path.insert(0, library)
        for module in setup.get("preload", []):
            __import__(module)
    except BaseException as exc:  # noqa: BLE001
        reply({"error": f"preload failed: {type(exc).__name__}: {exc}"})
        return
    finally:
        if library and library in sys.path:
            sys.path.remove(library)
    limit = int(setup.get("output_bytes", 65536))
    keep = [str(path) for path in setup.get("keep", [])]
    reply({"ready": True})
    for line in requests:
        sys.stdout.flush()
        sys.stderr.flush()
        reply(serve_one(json.loads(line), limit, keep))


def _proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


if __name__ == "__main__":
    main()
