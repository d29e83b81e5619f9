"""Every child macprof starts ends when macprof ends, however macprof ends: SIGKILL included,
which no handler of the parent sees, and on macOS too, which has no PR_SET_PDEATHSIG.

The parent makes one pipe and never writes to it; its write end stays in the parent alone (a
pipe's ends are not inherited, PEP 446, and a fork of the parent closes its copy), and the
read end is handed to the children (``popen_args``). A read of it returns end-of-file only
when no process holds the write end any more, that is when the parent is gone; whoever reads
it then kills the child's process group (a child started with ``start_new_session`` leads its
own: the child and whatever it started) or a child that leads none, the child alone. Two
readers, one line:

- macprof's own Python children (workers, probes) call ``hold()``: a thread that reads it;
- a program of someone else's (a server, mlx.launch: their pid stays the one macprof samples)
  gets a watcher beside it, ``watch_group(pid)``: ``python -m macprof.collect.lifeline PGID``, in a
  session of its own (no signal to macprof's group reaches it), which reads the line and ends
  by itself once the group it guards is gone.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import threading

ENV = "MACPROF_LIFELINE"  # "FD:INODE": the read end's number and its pipe's inode, as the parent saw it
WATCH_POLL_S = 0.5  # how often a watcher looks whether the group it guards is still there

_pipe: tuple[int, int] | None = None
_owner: int | None = None


def _forget() -> None:
    """In a fork of the parent: its copy of the write end would keep every line open."""
    global _pipe, _owner
    if _pipe is not None:
        for fd in _pipe:
            try:
                os.close(fd)
            except OSError:
                pass
    _pipe, _owner = None, None


def _read_end() -> int:
    global _pipe, _owner
    if _pipe is None or _owner != os.getpid():
        if _owner is None:
            os.register_at_fork(after_in_child=_forget)
        _pipe, _owner = os.pipe(), os.getpid()
    return _pipe[0]


def popen_args(env: dict[str, str]) -> dict:
    """Popen's ``pass_fds`` and ``env`` for a child that must end with this process."""
    fd = _read_end()
    return {"pass_fds": (fd,), "env": {**env, ENV: f"{fd}:{os.fstat(fd).st_ino}"}}


def watch_group(pid: int, remove: str | None = None) -> subprocess.Popen:
    """A watcher that kills the process group ``pid`` leads when this process is gone, and then
    deletes the file ``remove`` (the group's log, which this process would have deleted)."""
    return subprocess.Popen([sys.executable, "-m", __name__, str(pid), *([remove] if remove else [])],
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True,
                            **popen_args({**os.environ}))


def _line(environ) -> int | None:
    """The read end the parent handed over, or None: none, or an fd of that number that is not
    it (a grandchild that inherited the variable and not the fd)."""
    spec = environ.pop(ENV, None)  # this child's own children are not on this line
    try:
        fd, inode = (int(x) for x in (spec or "").split(":"))
        st = os.fstat(fd)
    except (ValueError, OSError):
        return None
    if not stat.S_ISFIFO(st.st_mode) or st.st_ino != inode:
        return None
    os.set_inheritable(fd, False)
    return fd


def hold(environ=os.environ) -> bool:
    """In a child of macprof's own: end it (and its group, if it leads one) when the parent is
    gone. False when no line was handed over."""
    fd = _line(environ)
    if fd is None:
        return False
    threading.Thread(target=_wait, args=(fd,), name="macprof-lifeline", daemon=True).start()
    return True


def _gone(fd: int, timeout: float | None) -> bool:
    """Whether the parent is gone (end of file); False when ``timeout`` passed first."""
    while True:
        try:
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                return False
            if not os.read(fd, 64):
                return True
        except InterruptedError:
            continue
        except OSError:
            return True


def _wait(fd: int) -> None:
    _gone(fd, None)
    try:
        if os.getpgrp() == os.getpid():  # a session of its own: it and all it started
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # not ours any more: nothing of macprof's left to end
        return False
    return True


def watch(pgid: int, environ=os.environ, remove: str | None = None) -> None:
    """The watcher's loop: kill the group (and delete ``remove``) when the parent is gone; return
    when the group is."""
    fd = _line(environ)
    if fd is None:
        sys.exit("macprof.collect.lifeline: no lifeline was handed over")
    while _group_alive(pgid):
        if _gone(fd, WATCH_POLL_S):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
            if remove:
                try:
                    os.unlink(remove)
                except OSError:
                    pass
            return


if __name__ == "__main__":
    watch(int(sys.argv[1]), remove=sys.argv[2] if len(sys.argv) > 2 else None)
