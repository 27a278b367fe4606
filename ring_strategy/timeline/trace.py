"""Reading timeline files, including those a crashed job left unfinished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Tuple, Union

__all__ = ["load", "close", "phases"]

PathLike = Union[str, Path]


def _parse(text: str) -> List[dict]:
    """The events of a timeline, closing it first if the writer never did:
    one event per line, a line cut off by a crash is dropped."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = text.splitlines()
    while lines and not lines[-1].rstrip().endswith(","):
        lines.pop()  # a half-written last line
    body = "\n".join(lines).rstrip().rstrip(",")
    return json.loads(body + "\n]" if body.lstrip().startswith("[") else "[" + body + "]")


def load(path: PathLike) -> List[dict]:
    """The events of the timeline at ``path``, as a list of dicts (the empty
    closing event ``{}`` left out).

    Raises:
        ValueError: the file is not a timeline.
    """
    text = Path(path).read_text()
    try:
        events = _parse(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not a ring timeline: {e}") from None
    return [e for e in events if e]


def close(path: PathLike) -> int:
    """Rewrites the timeline at ``path`` as valid JSON (after a crash the
    closing bracket is missing). Returns the number of events kept."""
    events = load(path)
    Path(path).write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
    return len(events)


def phases(events: List[dict]) -> Dict[str, List[Tuple[str, float, float]]]:
    """Pairs B/E events and takes complete (X) events: tensor name ->
    [(phase, start_us, end_us), ...] in the order the phases opened (nested
    phases included)."""
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    open_: Dict[int, List[Tuple[str, float, int]]] = {}
    found: Dict[str, List[Tuple[float, int, Tuple[str, float, float]]]] = {}
    for seq, e in enumerate(events):
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "B":
            open_.setdefault(pid, []).append((e["name"], e["ts"], seq))
        elif ph == "X":
            span = (e["name"], e["ts"], e["ts"] + e.get("dur", 0))
            found.setdefault(names.get(pid, str(pid)), []).append((e["ts"], seq, span))
        elif ph == "E" and open_.get(pid):
            name, start, opened = open_[pid].pop()
            found.setdefault(names.get(pid, str(pid)), []).append((start, opened, (name, start, e["ts"])))
    out: Dict[str, List[Tuple[str, float, float]]] = {}
    for tensor, spans in found.items():
        out[tensor] = [span for _, _, span in sorted(spans)]  # by start, then by the order they opened
    return out
