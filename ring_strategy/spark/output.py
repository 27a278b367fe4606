"""The ranks' output, forwarded from the Spark tasks to the driver's streams.

When ``run(stdout=..., stderr=...)`` names a stream, each task sends the
lines its rank writes there through the job's store (:class:`StoreOutput`),
and the driver writes them to that stream, prefixed by the rank as ringrun
prefixes them (:class:`OutputReader`). A stream not named stays where Spark
puts a task's output: the executor's log.

Each task sends batches ``output/<rank>/0``, ``output/<rank>/1``, ... (one
batch per :data:`FLUSH_SECONDS` at most); the driver reads each rank's next
batch in turn and empties the batches it has written, so the store holds
only what is in flight. A batch is a run of records ``u8 stream | u32 length
| line`` (big-endian).
"""

from __future__ import annotations

import struct
import threading
from typing import IO, Collection, Dict, List, Mapping, Tuple

from ring_strategy.runner.output import STREAMS, Output
from ring_strategy.runner.store import StoreClient
from ring_strategy.spark.spec import spark_key

__all__ = ["FLUSH_SECONDS", "OutputReader", "StoreOutput"]

#: Longest time a captured line waits in a task before it is sent.
FLUSH_SECONDS = 0.2
_HEAD = struct.Struct(">BI")


def _encode(lines: List[Tuple[str, bytes]]) -> bytes:
    return b"".join(_HEAD.pack(STREAMS.index(stream), len(line)) + line for stream, line in lines)


def _decode(batch: bytes) -> List[Tuple[str, bytes]]:
    lines, offset = [], 0
    while offset < len(batch):
        stream, length = _HEAD.unpack_from(batch, offset)
        offset += _HEAD.size
        lines.append((STREAMS[stream], batch[offset:offset + length]))
        offset += length
    return lines


class StoreOutput(Output):
    """A task's :class:`~ring_strategy.runner.output.Output`: lines of the
    ``captured`` streams go to the driver, the others to the executor's log.

    Args:
        client: The task's connection to the driver's store.
        job_id: The job id.
        rank: The task's rank.
        size: The number of ranks.
        captured: The streams to send.
    """

    def __init__(self, client: StoreClient, job_id: str, rank: int, size: int, captured: Collection[str]) -> None:
        super().__init__(size)
        self._client, self._job_id, self._rank = client, job_id, rank
        self._captured = frozenset(captured)
        self._pending: List[Tuple[str, bytes]] = []
        self._pending_lock = threading.Lock()
        self._batch = 0
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="ring-spark-output", daemon=True)
        self._flusher.start()

    def write(self, rank: int, stream: str, line: bytes) -> None:
        if stream not in self._captured:
            super().write(rank, stream, line)
            return
        with self._pending_lock:
            self._pending.append((stream, line if line.endswith(b"\n") else line + b"\n"))

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            self._flush()

    def _flush(self) -> None:
        with self._pending_lock:
            lines, self._pending = self._pending, []
        if not lines:
            return
        try:
            self._client.set(spark_key(self._job_id, "output", self._rank, self._batch), _encode(lines))
        except (ConnectionError, TimeoutError):
            return  # the driver is gone: nobody to show the lines to
        self._batch += 1

    def close(self) -> None:
        """Sends what is left, then closes."""
        self._stop.set()
        self._flusher.join()
        self._flush()
        super().close()


class OutputReader:
    """The driver's side: writes the lines the tasks sent to ``streams``.

    Args:
        client: A connection to the job's store, for this reader alone.
        job_id: The job id.
        size: The number of ranks.
        streams: The driver's stream for each captured stream name.
    """

    def __init__(self, client: StoreClient, job_id: str, size: int, streams: Mapping[str, IO[str]]) -> None:
        self._client, self._job_id = client, job_id
        self._output = Output(size, console=streams)
        self._next: Dict[int, int] = {rank: 0 for rank in range(size)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ring-spark-output-reader", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            stopping = self._stop.is_set()  # read before the last pass, which then sees every batch
            try:
                while self._read_all():
                    pass
            except (ConnectionError, TimeoutError):
                return
            if stopping:
                return
            self._stop.wait(FLUSH_SECONDS)

    def _read_all(self) -> bool:
        """Writes each rank's next batch, if there is one; True if any was."""
        found = False
        for rank, batch in self._next.items():
            key = spark_key(self._job_id, "output", rank, batch)
            data = self._client.try_get(key)
            if data is None:
                continue
            for stream, line in _decode(data):
                self._output.write(rank, stream, line)
            self._client.set(key, b"")  # read: only the key stays behind
            self._next[rank] = batch + 1
            found = True
        return found

    def stop(self) -> None:
        """Writes every batch sent so far, then stops (call it once the tasks have ended)."""
        self._stop.set()
        self._thread.join()
        self._client.close()
