"""Command line of ``python -m ring_strategy.bench``: parsing and checks.

Every check runs before ``ring_strategy.init()``, so a bad option ends every
rank the same way: argparse's message and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from ring_strategy.bench.collectives import DTYPES, OPS
from ring_strategy.bench.peers import CPU_PEERS, PEERS
from ring_strategy.bench.sizes import parse_size, parse_size_list, size_range

__all__ = ["Options", "CASES", "DEFAULT_SIZES", "build_parser", "parse_options"]

CASES = ("small-tensors",)
DEFAULT_SIZES = "4,4K,64K,1M,16M,64M"
DEFAULT_MIN_BYTES = "4"
DEFAULT_MAX_BYTES = "64M"
DEFAULT_STEP_FACTOR = 2


@dataclass(frozen=True)
class Options:
    """What to measure, as given on the command line (see ``--help``)."""

    ops: Tuple[str, ...]
    sizes: Tuple[int, ...]
    dtype: str
    iters: int
    warmup: int
    rounds: int
    check: bool
    compare: Tuple[str, ...]
    membw: bool
    case: Optional[str]
    num_tensors: int
    tensor_bytes: int
    json: Optional[Path]
    plot: Optional[Path]
    device: str = "cpu"


def _names(kind: str, allowed: Sequence[str]) -> Callable[[str], Tuple[str, ...]]:
    """An argparse type for a comma-separated list of names from ``allowed``."""

    def parse(text: str) -> Tuple[str, ...]:
        names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
        bad = [name for name in names if name not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"should be a comma-separated list of {kind} among {', '.join(allowed)}. Got: {text!r}"
            )
        return names

    return parse


def _positive(text: str) -> int:
    return _int_at_least(text, 1)


def _non_negative(text: str) -> int:
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"should be an integer of at least {minimum}. Got: {text!r}")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size_list(text: str) -> List[int]:
    try:
        return parse_size_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``python -m ring_strategy.bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m ring_strategy.bench",
        description="Collective benchmark in nccl-tests' format (size count type redop | time algbw "
        "busbw #wrong), optionally against torch.distributed gloo or MPI in the same processes. "
        "time is the median per-iteration time of the slowest rank. Only rank 0 prints.",
        epilog="Example: ringrun -np 2 python -m ring_strategy.bench --ops allreduce "
        "--sizes 4,4K,64K,1M,16M,64M --compare gloo --membw --check",
    )
    what = parser.add_argument_group("what to measure")
    what.add_argument("--ops", type=_names("ops", OPS), default=("allreduce",),
                      help=f"comma-separated, among {', '.join(OPS)} (default: allreduce)")
    what.add_argument("--sizes", type=_size_list, default=None,
                      help=f"comma-separated sizes in bytes, K/M/G binary suffixes (default: {DEFAULT_SIZES})")
    what.add_argument("--min-bytes", type=_size, default=None, help=f"first size of a range (default: {DEFAULT_MIN_BYTES})")
    what.add_argument("--max-bytes", type=_size, default=None, help=f"last size of a range (default: {DEFAULT_MAX_BYTES})")
    what.add_argument("--step-factor", type=_positive, default=None,
                      help=f"each size of the range is this times the last (default: {DEFAULT_STEP_FACTOR})")
    what.add_argument("--dtype", choices=DTYPES, default="float32", help="element type (default: float32)")
    what.add_argument("--case", choices=CASES, default=None,
                      help="a workload instead of the size table: small-tensors = many small allreduces "
                      "submitted at once, then all waited for (one training step's gradients)")
    what.add_argument("--num-tensors", type=_positive, default=200, help="tensors per small-tensors step (default: 200)")
    what.add_argument("--tensor-bytes", type=_size, default=16 << 10,
                      help="bytes per small-tensors tensor (default: 16K)")
    how = parser.add_argument_group("how")
    how.add_argument("--iters", type=_positive, default=20, help="timed iterations per size (default: 20)")
    how.add_argument("--warmup", type=_non_negative, default=5, help="untimed iterations first (default: 5)")
    how.add_argument("--rounds", type=_positive, default=4,
                     help="turns ring and each peer take per size, barrier-separated (default: 4)")
    how.add_argument("--check", action="store_true", help="check every result (fills #wrong)")
    how.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="where the tensors live: cpu (numpy arrays) or cuda (torch CUDA tensors, one GPU per "
                     "rank: local rank modulo the GPUs visible) (default: cpu)")
    how.add_argument("--compare", type=_names("peers", PEERS), default=(),
                     help="also time these libraries in the same processes: gloo (torch.distributed) or mpi "
                     "(mpi4py) on the CPU; nccl (raw NCCL through cupy.cuda.nccl) or torch-nccl "
                     "(torch.distributed) with --device cuda")
    how.add_argument("--membw", action="store_true",
                     help="measure the host's copy bandwidth and print allreduce busbw as a percentage of "
                     "the memory limit (total copy GB/s / 3)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the rows as a JSON list")
    out.add_argument("--plot", type=Path, default=None, metavar="FILE.png", help="plot busbw against size")
    return parser


def _sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[int, ...]:
    ranged = (args.min_bytes, args.max_bytes, args.step_factor)
    if args.sizes is not None:
        if any(value is not None for value in ranged):
            parser.error("give either --sizes or --min-bytes/--max-bytes/--step-factor, not both")
        return tuple(args.sizes)
    if all(value is None for value in ranged):
        return tuple(parse_size_list(DEFAULT_SIZES))
    low = parse_size(DEFAULT_MIN_BYTES) if args.min_bytes is None else args.min_bytes
    high = parse_size(DEFAULT_MAX_BYTES) if args.max_bytes is None else args.max_bytes
    try:
        return tuple(size_range(low, high, args.step_factor or DEFAULT_STEP_FACTOR))
    except ValueError as e:
        parser.error(str(e))


def _no_cuda() -> str:
    """Why torch CUDA tensors cannot be made here, or ""."""
    if importlib.util.find_spec("torch") is None:
        return "needs torch (pip install 'ring-strategy[torch]')"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU here"
    return ""


def _output_path(parser: argparse.ArgumentParser, option: str, path: Optional[Path]) -> None:
    if path is not None and not path.resolve().parent.is_dir():
        parser.error(f"{option}: the folder of {str(path)!r} does not exist")


def parse_options(argv: Optional[Sequence[str]] = None) -> Options:
    """Parses and checks the command line (``sys.argv[1:]`` when None).

    Raises:
        SystemExit: With status 2 and argparse's message, for a bad option.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.case is not None and (args.sizes is not None or args.min_bytes is not None or args.max_bytes is not None):
        parser.error(f"--case {args.case} has its own sizes (--num-tensors, --tensor-bytes): drop --sizes, "
                     "--min-bytes and --max-bytes")
    sizes = _sizes(parser, args)
    wrong_side = [p for p in args.compare if (p in CPU_PEERS) != (args.device == "cpu")]
    if wrong_side:
        parser.error(f"--compare {','.join(wrong_side)} does not run with --device {args.device}")
    if args.device == "cuda":
        if args.membw:
            parser.error("--membw measures host memory: not with --device cuda")
        why = _no_cuda()
        if why:
            parser.error(f"--device cuda: {why}")
    _output_path(parser, "--json", args.json)
    _output_path(parser, "--plot", args.plot)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed here (pip install matplotlib)")
    return Options(
        ops=args.ops, sizes=sizes, dtype=args.dtype, iters=args.iters, warmup=args.warmup, rounds=args.rounds,
        check=args.check, compare=args.compare, membw=args.membw, case=args.case,
        num_tensors=args.num_tensors, tensor_bytes=args.tensor_bytes, json=args.json, plot=args.plot,
        device=args.device,
    )
