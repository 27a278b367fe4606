"""Workers' output: to ringrun's console, each line prefixed by its rank, and
optionally to one pair of files per rank.

With ``--output-filename DIR`` every rank's lines also go, unprefixed, to
``DIR/rank.N/stdout`` and ``DIR/rank.N/stderr``, N padded with zeros to the
width of the largest rank so that the directories sort in rank order (the
layout of ``horovodrun --output-filename``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, Dict, List, Mapping, Optional, Tuple

__all__ = ["MAX_LINE_BYTES", "Output", "log", "rank_directory"]

#: Longest line piece forwarded at once; longer lines are split.
MAX_LINE_BYTES = 64 * 1024

STREAMS = ("stdout", "stderr")


def rank_directory(directory: str, rank: int, size: int) -> str:
    """Returns ``DIR/rank.N`` for ``rank`` of a job of ``size`` workers.

    Args:
        directory: The ``--output-filename`` directory.
        rank: The worker's rank.
        size: The number of workers (sets the zero padding).

    Returns:
        The path of the rank's directory.
    """
    width = len(str(max(size - 1, 0)))
    return os.path.join(directory, f"rank.{rank:0{width}d}")


def log(message: str) -> None:
    """Prints ``ringrun: message`` on ringrun's stderr; never fails."""
    try:
        sys.stderr.write(f"ringrun: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _TextAsBinary:
    """Writes bytes to a text stream that has no binary buffer (e.g. a StringIO)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self._stream.flush()


def _binary(stream: IO[str]) -> IO[bytes]:
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else _TextAsBinary(stream)  # type: ignore[return-value]


class Output:
    """Writes workers' lines, whole and one at a time, wherever they belong.

    Any thread may call :meth:`write`; pipes of local workers are drained by
    threads started with :meth:`forward`. Failures to write (ringrun's own
    stdout closed, a full disk) never block a worker: its lines are dropped.

    Args:
        size: The number of workers.
        directory: The ``--output-filename`` directory, or None for the console only.
        console: The text stream each of ``"stdout"`` and ``"stderr"`` goes to
            (default: this process's ``sys.stdout`` and ``sys.stderr``).

    Raises:
        OSError: If the per-rank directories cannot be created.
    """

    def __init__(self, size: int, directory: Optional[str] = None,
                 console: Optional[Mapping[str, IO[str]]] = None) -> None:
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        streams = {"stdout": sys.stdout, "stderr": sys.stderr, **(console or {})}
        self._console = {name: _binary(stream) for name, stream in streams.items()}
        self._files: Dict[Tuple[int, str], IO[bytes]] = {}
        self._directory, self._size = directory, size
        if directory is not None:
            for rank in range(size):
                self._open(rank)

    def _open(self, rank: int) -> None:
        """Creates the files of ``rank`` (an elastic job's worker numbers grow past its size)."""
        assert self._directory is not None
        path = rank_directory(self._directory, rank, self._size)
        os.makedirs(path, exist_ok=True)
        for stream in STREAMS:
            self._files[rank, stream] = open(os.path.join(path, stream), "wb")

    def write(self, rank: int, stream: str, line: bytes) -> None:
        """Writes one line of ``rank`` on ``stream`` (``"stdout"`` or ``"stderr"``).

        Args:
            rank: The worker's rank.
            stream: Which of the worker's streams the line came from.
            line: The line; a newline is added when it has none.
        """
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            if self._directory is not None and (rank, stream) not in self._files:
                try:
                    self._open(rank)
                except OSError:
                    pass
            for dst, data in ((self._console[stream], b"[%d] %s" % (rank, line)),
                              (self._files.get((rank, stream)), line)):
                if dst is None:
                    continue
                try:
                    dst.write(data)
                    dst.flush()
                except (OSError, ValueError):
                    pass  # the destination is gone; keep draining so workers never block

    def forward(self, src: IO[bytes], rank: int, stream: str) -> None:
        """Drains the pipe ``src`` of a local worker in a background thread.

        Args:
            src: The read end of the worker's stdout or stderr pipe.
            rank: The worker's rank.
            stream: ``"stdout"`` or ``"stderr"``.
        """
        thread = threading.Thread(
            target=self._pump, args=(src, rank, stream), name=f"ringrun-{stream}-{rank}", daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    def _pump(self, src: IO[bytes], rank: int, stream: str) -> None:
        try:
            while True:
                line = src.readline(MAX_LINE_BYTES)
                if not line:
                    return
                self.write(rank, stream, line)
        finally:
            src.close()

    def join(self, timeout: float) -> None:
        """Waits for the pipes to drain; a grandchild may hold one open."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Closes the per-rank files."""
        with self._lock:
            files, self._files = self._files, {}
            self._directory = None  # later lines go to the console only
        for f in files.values():
            try:
                f.close()
            except OSError:
                pass
