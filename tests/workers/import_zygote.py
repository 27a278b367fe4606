"""Imports modules one by one, each first: `python import_zygote.py PRELOAD MODULE...`.

PRELOAD is a comma-separated list of third-party modules (frameworks) that
this process imports once; then, for each MODULE, it forks a child that
imports MODULE and nothing else of ring_strategy or keras_callbacks (none
of their modules is loaded in this process, so the child's import of MODULE
is its first). The frameworks the module needs are already loaded in the
child, which saves their import time, once per module.

Prints one JSON line per MODULE, in order:
``{"module": M, "error": traceback or null, "loaded": [names of sys.modules]}``
where "loaded" lists which of the names given with --watch the child had
loaded after the import. A child that does not finish within the time limit
is killed and reported with the error "timed out" (the caller then imports
the module in a fresh interpreter instead).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

_OWN = ("ring_strategy", "keras_callbacks")
_LIMIT_SECONDS = 60.0


def _child(module: str, watch: list, out: int) -> None:
    error = None
    try:
        __import__(module)
    except BaseException:  # noqa: BLE001 - reported to the parent
        error = traceback.format_exc()
    loaded = sorted(m for m in watch if m in sys.modules)
    os.write(out, (json.dumps({"module": module, "error": error, "loaded": loaded}) + "\n").encode())


def _run_one(module: str, watch: list) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _child(module, watch, write)
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + _LIMIT_SECONDS
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return {"module": module, "error": "timed out", "loaded": []}
        time.sleep(0.005)
    with os.fdopen(read, "rb") as f:
        text = f.read().decode()
    return json.loads(text) if text else {"module": module, "error": "the child died", "loaded": []}


def main() -> None:
    preload = [m for m in sys.argv[1].split(",") if m]
    watch = [m for m in os.environ.get("ZYGOTE_WATCH", "").split(",") if m]
    for name in preload:
        __import__(name)
    assert not any(m.split(".")[0] in _OWN for m in sys.modules), "the preload imported the package itself"
    for module in sys.argv[2:]:
        print(json.dumps(_run_one(module, watch)), flush=True)


if __name__ == "__main__":
    main()
