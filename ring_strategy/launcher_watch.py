"""A worker whose ``ringrun`` is gone stops itself.

ringrun stops its workers when it fails, is interrupted or is terminated;
when it is killed outright (SIGKILL, the OOM killer) it cannot. So each
worker it starts inherits the read end of a pipe (``RING_LAUNCHER_PIPE``:
its descriptor and inode) whose write end only ringrun holds: when ringrun
dies, the kernel closes that end and the worker reads end-of-file. ``init()`` starts a thread that
waits for it; it then says why on stderr, sends this process SIGTERM and,
if the process is still alive after ringrun's grace period
(``RING_LAUNCHER_GRACE_SECONDS``, from ``--grace-period``; by default
``GRACE_SECONDS``) because a SIGTERM handler did not exit, ends it.
"""

from __future__ import annotations

import math
import os
import signal
import stat
import sys
import threading
import time
from typing import Mapping, Optional

from ring_strategy._contracts import LAUNCHER_GRACE_SECONDS, LAUNCHER_PIPE

__all__ = ["GRACE_SECONDS", "watch_launcher"]

GRACE_SECONDS = 5.0
_watching = False
_lock = threading.Lock()


def _launcher_fd(environ: Mapping[str, str]) -> Optional[int]:
    """The inherited pipe's descriptor, or None when this process has none
    (not started by ringrun, or a process that inherited the variable but
    not the pipe, whose descriptor number may now be another file)."""
    try:
        fd_text, inode_text = environ.get(LAUNCHER_PIPE, "").split(":")
        fd, inode = int(fd_text), int(inode_text)
        st = os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd if stat.S_ISFIFO(st.st_mode) and st.st_ino == inode else None


def _grace_seconds(environ: Mapping[str, str]) -> float:
    """ringrun's grace period between SIGTERM and SIGKILL."""
    try:
        grace = float(environ.get(LAUNCHER_GRACE_SECONDS, GRACE_SECONDS))
    except ValueError:
        return GRACE_SECONDS
    return grace if math.isfinite(grace) and grace >= 0 else GRACE_SECONDS


def watch_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """Starts watching ringrun (once per process); True if there is one to watch."""
    global _watching
    fd = _launcher_fd(environ)
    with _lock:
        if fd is None or _watching:
            return fd is not None
        _watching = True
    threading.Thread(target=_stop_when_gone, args=(fd, _grace_seconds(environ)), name="ring-launcher-watch",
                     daemon=True).start()
    return True


def _stop_when_gone(fd: int, grace: float) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            return  # the descriptor is not a pipe we can watch
    try:
        sys.stderr.write(f"ring: ringrun, which started this worker (pid {os.getpid()}), is gone; stopping\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr went with ringrun
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGKILL)
