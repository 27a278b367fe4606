"""``python -m ring_strategy.timeline close FILE`` / ``render FILE OUT.png``."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ring_strategy.timeline.trace import close, load


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the timeline tool; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m ring_strategy.timeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_close = sub.add_parser("close", help="make a timeline left by a crashed job valid JSON")
    p_close.add_argument("file")
    p_render = sub.add_parser("render", help="draw a timeline as a PNG")
    p_render.add_argument("file")
    p_render.add_argument("out")
    p_render.add_argument("--rows", type=int, default=24, help="tensors to draw (default 24)")
    args = parser.parse_args(argv)
    try:
        if args.command == "close":
            print(f"{args.file}: {close(args.file)} events, valid JSON")
        else:
            from ring_strategy.timeline.render import render

            render(load(args.file), args.out, args.rows)
            print(f"wrote {args.out}")
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
