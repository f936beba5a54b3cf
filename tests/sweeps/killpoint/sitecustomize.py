"""Test-only: SIGKILL a sweep at an exact point of a file write (tests/sweeps/test_sigkill.py).

With this directory on PYTHONPATH, every process of a sweep (the command, the forkserver, its
workers) starts with the audit hook below. ARCH_ZOO_TEST_KILL names a file; while that file holds
``EVENT NAME N WHOM SERIAL``, the N-th matching event in one process tears the file being written the
way a kill mid-write would, deletes the arming file (one kill per arming) and SIGKILLs WHOM:
``group`` (the sweep and its workers, as a scheduler kills a job) or ``self`` (that process only).

  rename NAME N  the N-th rename of a temporary file whose name contains NAME (the last step of an
                 atomic write): the temporary file is cut to half its size, as if the kill had come
                 while it was being written, and the rename never happens;
  write NAME N   the N-th open for writing of the file named NAME (a write in place): an append
                 gets half of the file's last line without its newline, a rewrite keeps half the file.
"""
import os
import signal
import sys

_ARMED = os.environ.get("ARCH_ZOO_TEST_KILL")
_state = {"busy": False, "seen": 0, "spec": None}


def _tear(path: str, append: bool) -> None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return
    if append:
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        with open(path, "ab") as f:
            f.write(last[: max(1, len(last) // 2)])
    else:
        os.truncate(path, len(data) // 2)


def _spec():
    try:
        with open(_ARMED) as f:
            text = f.read()
        event, name, n, whom = text.split()[:4]
    except (OSError, ValueError):
        return None
    if _state["spec"] != text:  # newly armed (the text ends with a serial): count from here
        _state.update(spec=text, seen=0)
    return event, name, int(n), whom


def _match(event, args, spec):
    kind, name = spec[0], spec[1]
    if kind == "rename" and event == "os.rename":
        path = os.fsdecode(args[0])
        return path if name in os.path.basename(path) and path.endswith(".tmp") else None
    if kind == "write" and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)) \
            and isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR):
        path = os.fsdecode(args[0])
        return path if os.path.basename(path) == name else None
    return None


def _hook(event, args):
    if _state["busy"] or event not in ("os.rename", "open"):
        return
    _state["busy"] = True
    try:
        spec = _spec()
        path = spec and _match(event, args, spec)
        if not path:
            return
        _state["seen"] += 1
        if _state["seen"] < spec[2]:
            return
        if spec[0] == "rename" or os.path.exists(path):
            _tear(path, append=spec[0] == "write" and bool(args[2] & os.O_APPEND))
        os.unlink(_ARMED)
        if spec[3] == "group":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    finally:
        _state["busy"] = False


if _ARMED:
    sys.addaudithook(_hook)
