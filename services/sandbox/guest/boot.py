"""First program inside every sandbox; the service passes this file's text to `python -c`.

It reads a header from stdin (8 hex digits of length, then JSON) and forks. The child is the run: it
applies the rlimits, drops to the run's own uid when it starts as root, then either runs Python user
code in-process (the body follows the header on stdin) or execs Node with `runner.js`, and writes one
JSON result line on the control fd named in the header, so stdout and stderr stay the program's own.
The parent supervises: it stops the run at the wall-time limit, reaps it and reports exit status, CPU
time and peak memory as a second line. Standard library only: it runs on the sandbox's runtime, not on
the service's virtualenv. Nothing here trusts the user code; the sandbox does the containment.
"""

import os
import sys

USER_FILE = "main.py"


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            os._exit(70)  # the service closed stdin early: nothing to run
        buf += chunk
    return bytes(buf)


def _apply_limits(rlimits):
    import resource
    import signal

    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Past RLIMIT_FSIZE a write fails with EFBIG ("File too large") instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _drop_privileges(uid):
    # Each pool slot has its own uid, so RLIMIT_NPROC (counted per uid) is a per-run process limit,
    # and the code holds no capability at all once it is not root.
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _send(fd, record):
    import json

    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def _user_traceback(exc):
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == USER_FILE]
    text = "".join(traceback.format_exception_only(type(exc), exc))
    if frames:
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + text
    return text, (frames[-1].lineno if frames else 0)


def _error(kind, message, line=0, exc_type="", tb=""):
    return {"status": "error", "kind": kind, "message": message, "line": line or 0, "type": exc_type, "traceback": tb}


def _run_python(body):
    import json
    import linecache
    import traceback

    code, args = body["code"], body["args"]
    try:
        compiled = compile(code, USER_FILE, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = exc.lineno or 0
        tb = "".join(traceback.format_exception_only(type(exc), exc))
        return _error("syntax", "SyntaxError: %s (line %d)" % (exc.msg, line), line, "SyntaxError", tb)
    except (ValueError, MemoryError) as exc:  # null bytes in the source; huge nesting
        return _error("syntax", "%s: %s" % (type(exc).__name__, exc), 0, type(exc).__name__)
    # Source lines for the traceback of code that has no file on disk.
    linecache.cache[USER_FILE] = (len(code), None, code.splitlines(True), USER_FILE)
    namespace = {"__name__": "main", "__file__": USER_FILE, "__builtins__": __builtins__}
    try:
        exec(compiled, namespace)
        main = namespace.get("main")
        if not callable(main):
            return _error("no_main", "the code defines no function main(**args)")
        value = main(**args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        record = _error("exit", "the code called exit(%s) before main returned" % (exc.code,), exc_type="SystemExit")
        record["exit_code"] = code
        return record
    except MemoryError as exc:
        tb, line = _user_traceback(exc)
        return _error("memory", "MemoryError: the memory limit was reached", line, "MemoryError", tb)
    except BaseException as exc:  # noqa: BLE001 - every user error becomes a record
        tb, line = _user_traceback(exc)
        head = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        return _error("exception", head + (" (line %d)" % line if line else ""), line, type(exc).__name__, tb)
    try:
        value_json = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        return _error("bad_return", "main returned a value that is not JSON (%s: %s)" % (type(value).__name__, exc))
    return {"status": "ok", "value_json": value_json}


def _child(header):
    """The run itself: limits, then a uid of its own, then the code. Never returns."""
    ctl = header["ctl_fd"]
    _apply_limits(header["rlimits"])
    if header.get("uid") is not None:
        _drop_privileges(header["uid"])
    if header["language"] == "javascript":
        node = header["node"]
        argv = [node] + header["node_args"] + ["-e", header["runner_js"], str(ctl)]
        os.execve(node, argv, dict(os.environ))  # runner.js reads the body from stdin
    import json

    body = json.loads(_read_exact(0, header["body_len"]))
    record = _run_python(body)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or full stream must not hide the result
            pass
    _send(ctl, record)
    # _exit: threads the code left running must not keep the sandbox alive after main returned.
    os._exit(0 if record["status"] == "ok" else record.get("exit_code", 1) & 0xFF)


def _supervise(pid, header):
    """Wait for the run (stopping it at the wall-time limit) and report its exit and resource usage.

    This process keeps the service's uid (the code cannot signal it), and reaping the run with wait4
    gives the CPU time and peak memory of the run and of every child it waited for.
    """
    import signal

    timed_out = []

    def _on_deadline(signum, frame):
        timed_out.append(True)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    signal.signal(signal.SIGALRM, _on_deadline)
    signal.setitimer(signal.ITIMER_REAL, header["wall_s"])
    _, status, usage = os.wait4(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    report = {
        "usage": {
            "cpu_ms": int((usage.ru_utime + usage.ru_stime) * 1000),
            "peak_rss_bytes": usage.ru_maxrss * 1024,
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status),
            "timed_out": bool(timed_out),
        }
    }
    _send(header["ctl_fd"], report)
    # Leaving ends the sandbox: bwrap's pid 1 exits with us and the kernel kills what the run left behind.
    os._exit(0)


def main():
    import json

    size = int(_read_exact(0, 8), 16)
    header = json.loads(_read_exact(0, size))
    pid = os.fork()
    if pid == 0:
        try:
            _child(header)
        finally:
            os._exit(70)
    _supervise(pid, header)


if __name__ == "__main__":  # `python -c` runs it as __main__; importing it does nothing
    main()
