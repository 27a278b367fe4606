"""``python -m ring_strategy.bench.standard --docs docs/performance.md``: the
standard benchmark set, written into the generated regions of the doc.

Each job runs as a subprocess with ``--json``; its rows become a Markdown
table in the region named after the job (see
:mod:`ring_strategy.bench.doc_regions`), under the exact command. The
``machine`` region gets the date and the host, and the 2-rank allreduce rows
are plotted into the image the doc shows. A job that cannot run here (the
namespace hosts without root) or fails fills its region with the reason; the
command then exits with status 1 after writing the doc.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from ring_strategy.bench.doc_regions import case_table, replace_regions, scaling_table, sizes_table, train_table
from ring_strategy.bench.scaling import CONFIGS

__all__ = ["Job", "standard_jobs", "machine_lines", "region_text", "plot_rows", "main"]

SIZES = "4,4K,64K,1M,16M,64M"
SCALING_CONFIGS = list(CONFIGS)  # every allreduce configuration, side by side
JOB_TIMEOUT_S = 600
REPO_ROOT = Path(__file__).resolve().parents[2]
# MPICH, the second MPI anchor: PyPI's `mpich` wheel (its own mpiexec), which
# `make bench` installs here; mpi4py loads its library (MPI4PY_LIBMPI).
MPICH_PREFIX = REPO_ROOT / "build" / "mpich"


@dataclass(frozen=True)
class Job:
    """One benchmark run of the standard set.

    Attributes:
        region: The doc region its table goes into.
        launcher: ``mpirun N`` (Open MPI), ``mpirun-tcp N`` (Open MPI's TCP
            transport on loopback, ring over TCP with its fast path),
            ``mpich N`` (MPICH's mpiexec), ``ringrun N`` or ``netns N``
            (namespace hosts of ``per_host`` ranks each).
        ranks: The world size.
        module: ``ring_strategy.bench`` or ``ring_strategy.bench.train``.
        args: The module's options, without ``--json``.
        table: Renders the job's JSON objects as Markdown lines.
        doc: The stem of the Markdown file its region lives in.
        per_host: Ranks on each namespace host (``netns`` only).
        delay_ms: One-way delay between namespace hosts (``netns`` only;
            tests/multihost/delayed.py).
    """

    region: str
    launcher: str
    ranks: int
    module: str
    args: Sequence[str]
    table: Callable[[Sequence[Dict[str, Any]]], List[str]]
    doc: str = "performance"
    per_host: int = 1
    delay_ms: float = 0.0

    def shown_command(self) -> str:
        """The command as the doc prints it."""
        words = [*_launch_words(self.launcher, self.ranks, shown=True, per_host=self.per_host), "python", "-m",
                 self.module, *self.args]
        delay = f" (hosts {self.delay_ms:g} ms apart, one way)" if self.delay_ms else ""
        return " ".join(words) + delay


def standard_jobs() -> List[Job]:
    """The standard set, in the order it runs."""
    bench, train = "ring_strategy.bench", "ring_strategy.bench.train"
    sizes = ["--ops", "allreduce", "--sizes", SIZES]
    return [
        Job("allreduce-2", "mpirun", 2, bench, [*sizes, "--compare", "mpi", "--membw", "--check"], sizes_table),
        Job("allreduce-2-mpich", "mpich", 2, bench, ["--ops", "allreduce", "--sizes", "4,4K,64K,1M", "--compare",
                                                     "mpi", "--check"], sizes_table),
        # The fast path over TCP (loopback: Open MPI cannot be started in
        # the namespace hosts) against Open MPI's TCP transport.
        Job("allreduce-2-tcp", "mpirun-tcp", 2, bench, ["--ops", "allreduce", "--sizes", "4,4K,64K", "--compare",
                                                        "mpi", "--check", "--iters", "100", "--warmup", "10"],
            sizes_table),
        Job("small-tensors-2", "mpirun", 2, bench, ["--case", "small-tensors", "--compare", "mpi", "--check"],
            case_table),
        Job("train-2", "ringrun", 2, train, ["--compare", "ddp"], train_table),
        Job("allreduce-4", "mpirun", 4, bench, [*sizes, "--compare", "mpi,gloo", "--iters", "10", "--warmup", "3"],
            sizes_table),
        Job("netns-2", "netns", 2, bench, [*sizes, "--check"], sizes_table),
        Job("scaling-8", "netns", 8, "ring_strategy.bench.scaling",
            ["--configs", ",".join(SCALING_CONFIGS), "--sizes", "4,1K,16K,64K,128K,256K,1M,4M", "--iters", "10"],
            scaling_table, doc="scaling", per_host=2, delay_ms=0.5),
    ]


def _launch_words(launcher: str, ranks: int, shown: bool, per_host: int = 1) -> List[str]:
    if launcher == "mpirun":
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return ["mpirun", *root, "--oversubscribe", "-np", str(ranks)]
    if launcher == "mpirun-tcp":  # both libraries over TCP on loopback, ring with its fast path
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return ["mpirun", *root, "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca",
                "btl_tcp_if_include", "lo", "-np", str(ranks), "env", "RING_TRANSPORT=tcp", "RING_FAST_PATH=1"]
    if launcher == "mpich":  # no binding, as Open MPI's --oversubscribe does
        return ["mpiexec" if shown else str(MPICH_PREFIX / "bin" / "mpiexec"), "-bind-to", "none", "-n", str(ranks)]
    if launcher == "ringrun":
        return ["ringrun" if shown else f"{sys.executable} -m ring_strategy.runner.launch", "-np", str(ranks)]
    hosts = ",".join(f"10.99.0.{10 + i}:{per_host}" for i in range(ranks // per_host))
    return ["ringrun", "-np", str(ranks), "-H", hosts] if shown else ["-np", str(ranks), "-H", hosts]


def _environment() -> Dict[str, str]:
    """This process's variables with this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def _local_command(job: Job, json_path: Path) -> List[str]:
    words = _launch_words(job.launcher, job.ranks, shown=False)
    return [*shlex.split(" ".join(words)), sys.executable, "-m", job.module, *job.args, "--json", str(json_path)]


def _run_netns(job: Job, json_path: Path, workdir: Path) -> subprocess.CompletedProcess:
    """Runs ``job`` on namespace hosts of ``job.per_host`` ranks (tests/multihost), with
    ``job.delay_ms`` between them (tests/multihost/delayed.py)."""
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from tests.multihost.delayed import DelayedLinks
        from tests.multihost.netns import Cluster, missing_requirement
    except ImportError:
        raise _Skipped("the namespace hosts come from tests/multihost/netns.py, which needs a checkout") from None

    reason = missing_requirement()
    if reason is not None:
        raise _Skipped(reason)
    cluster = Cluster(workdir, job.ranks // job.per_host)
    cluster.start()
    try:
        cmd = [*cluster.exec_prefix(0), sys.executable, "-m", "ring_strategy.runner.launch", "-i", str(cluster.key),
               *_launch_words("netns", job.ranks, shown=False, per_host=job.per_host), sys.executable, "-m",
               job.module, *job.args, "--json", str(json_path)]
        env = {**_environment(), **cluster.ringrun_env()}
        # Jumbo frames: the relays copy packets in Python, and fewer of them leave the delay to dominate.
        links = DelayedLinks(cluster, job.delay_ms, mtu=9000) if job.delay_ms else contextlib.nullcontext()
        with links:
            return subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=JOB_TIMEOUT_S)
    finally:
        cluster.stop()


class _Skipped(Exception):
    """A job that cannot run on this machine; the message says why."""


def _mpich_library() -> Path:
    """MPICH's libmpi under MPICH_PREFIX, which mpi4py then loads instead of Open MPI's."""
    library = MPICH_PREFIX / "lib" / "libmpi.so.12"
    if not (MPICH_PREFIX / "bin" / "mpiexec").exists() or not library.exists():
        raise _Skipped(f"MPICH is not installed in {MPICH_PREFIX} (`make bench` installs PyPI's mpich there)")
    return library


def run_job(job: Job, workdir: Path) -> List[Dict[str, Any]]:
    """Runs ``job`` and returns its JSON objects; prints its output.

    Raises:
        _Skipped: The job cannot run here.
        RuntimeError: The job failed or wrote no rows.
    """
    json_path = workdir / f"{job.region}.json"
    print(f"$ {job.shown_command()}", flush=True)
    if job.launcher == "netns":
        result = _run_netns(job, json_path, workdir)
    else:
        if job.launcher.startswith("mpirun") and shutil.which("mpirun") is None:
            raise _Skipped("mpirun is missing (`make sysdeps` installs Open MPI)")
        env = _environment()
        if job.launcher == "mpich":
            env["MPI4PY_LIBMPI"] = str(_mpich_library())
        # No stdin: MPICH's mpiexec forwards its stdin to rank 0, and the
        # forwarding took the cores' time (a 4 B allreduce: 60 us instead of 4.4).
        result = subprocess.run(_local_command(job, json_path), env=env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    print(result.stdout, end="", flush=True)
    if result.returncode != 0 or not json_path.exists():
        raise RuntimeError(f"exit status {result.returncode}: {result.stderr.strip()[-2000:]}")
    return json.loads(json_path.read_text())


def machine_lines(now: datetime.datetime) -> List[str]:
    """The date, the host's CPU and cores, Python and the load when the run started."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"Run of `make bench` on {now:%Y-%m-%d %H:%M} UTC: {os.cpu_count()} core(s) of {model} "
        f"({platform.machine()}; caches {cache_text()}), Python {platform.python_version()}. Load average when "
        f"it started: {load}; other processes may share the machine, so figures vary from run to run.",
    ]


def cache_text(cpu: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> str:
    """The caches of CPU 0 as the kernel lists them ("L1d 48K, L1i 32K, L2
    2048K, L3 491520K"), or "unknown"."""
    found = []
    for index in sorted(cpu.glob("index*")):
        try:
            level, kind, size = ((index / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        found.append(f"L{level}{suffix} {size}")
    return ", ".join(found) or "unknown"


def region_text(job: Job, objects: Optional[Sequence[Dict[str, Any]]], problem: Optional[str]) -> str:
    """A region's Markdown: the command, then the table or why there is none."""
    lines = [f"`{job.shown_command()}`", ""]
    lines += job.table(objects) if objects else [f"Not measured in this run: {problem}"]
    return "\n".join(lines) + "\n"


def plot_rows(objects: Sequence[Dict[str, Any]]) -> list:
    """``bench --json`` size objects back into :class:`~ring_strategy.bench.results.Row` (for the plot)."""
    from ring_strategy.bench.results import Measurement, Row

    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for o in objects:
        groups.setdefault((o["op"], o["size_bytes"]), []).append(o)
    rows = []
    for (op, size), group in groups.items():
        first = group[0]
        factor = first["busbw_gbps"] / first["algbw_gbps"] if first.get("algbw_gbps") else 1.0

        def secs(us: Optional[float]) -> Optional[float]:
            return None if us is None else us / 1e6

        results = [Measurement("ring", secs(first["time_us"]), first.get("wrong"))]
        results += [Measurement(o["peer"], secs(o["peer_time_us"]), o.get("peer_wrong")) for o in group if o.get("peer")]
        rows.append(Row(op, size, first["count"], first["dtype"], first["redop"], factor, tuple(results)))
    return rows


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ring_strategy.bench.standard",
                                     description="Runs the standard benchmark set and rewrites the generated "
                                     "regions (<!-- bench:NAME begin/end -->) of a Markdown file.")
    parser.add_argument("--docs", type=Path, required=True, help="the Markdown file, e.g. docs/performance.md")
    parser.add_argument("--plot", type=Path, default=None,
                        help="image of the 2-rank allreduce (default: images/allreduce.png next to --docs)")
    parser.add_argument("--only", default=None, help="comma-separated regions to run (default: all)")
    args = parser.parse_args(argv)
    if not args.docs.is_file():
        parser.error(f"--docs: {str(args.docs)!r} is not a file")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the set, rewrites the doc and the plot; 0 when every job ran, else 1."""
    args = _parse(argv)
    jobs = [j for j in standard_jobs()
            if j.doc == args.docs.stem and (args.only is None or j.region in args.only.split(","))]
    text = args.docs.read_text()
    replace_regions(text, {"machine": "", **{j.region: "" for j in jobs}})  # every marker is there, before running
    regions = {"machine": "\n".join(machine_lines(datetime.datetime.now(datetime.timezone.utc))) + "\n"}
    failed = False
    with tempfile.TemporaryDirectory(prefix="ring-bench-") as tmp:
        for job in jobs:
            objects, problem = None, None
            try:
                objects = run_job(job, Path(tmp))
            except _Skipped as e:
                problem = str(e)
                print(f"# skipped {job.region}: {problem}", flush=True)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                problem, failed = f"the job failed ({str(e).splitlines()[0] if str(e) else type(e).__name__})", True
                print(f"# {job.region} failed: {e}", file=sys.stderr, flush=True)
            regions[job.region] = region_text(job, objects, problem)
            if job.region == "allreduce-2" and objects:
                from ring_strategy.bench.plot import plot_sizes

                limit = objects[0].get("mem_limit_busbw_gbps")
                image = args.plot or args.docs.parent / "images" / "allreduce.png"
                plot_sizes(image, plot_rows(objects), "ring_strategy.bench, 2 rank(s), float32 (mpirun)", limit)
    args.docs.write_text(replace_regions(text, regions))
    print(f"# wrote {args.docs}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
