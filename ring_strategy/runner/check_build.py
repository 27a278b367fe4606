"""``ringrun --check-build``: what this installation of ring can do.

Prints the version, then, as ``horovodrun --check-build`` does, one ``[X]`` or
``[ ]`` line per framework, transport, launcher and tensor-operation backend.
Frameworks are imported in subprocesses that run at once (those sharing a
heavy dependency in one), so a broken installation shows up as such and
cannot crash the check, and the check takes about as long as the slowest
group of imports. The native engine is loaded
in a subprocess too.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import mmap
import os
import secrets
import shutil
import socket
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

import ring_strategy
from ring_strategy import _config_values as values

__all__ = ["FRAMEWORKS", "Row", "check_build_report", "installed_version", "print_check_build"]

#: Seconds each import may take before it is reported as hanging.
PROBE_TIMEOUT_SECONDS = 120.0

# (shown name, module to import, distributions that may provide it: their
# version is shown when the module has none, or cannot be imported)
FRAMEWORKS: Sequence[Tuple[str, str, Tuple[str, ...]]] = (
    ("PyTorch", "torch", ("torch",)),
    ("PyTorch Lightning", "pytorch_lightning", ("pytorch-lightning",)),
    ("Lightning", "lightning", ("lightning",)),
    ("Keras", "keras", ("keras",)),
    ("TensorFlow", "tensorflow", ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos")),
    ("JAX", "jax", ("jax",)),
    ("Ray", "ray", ("ray",)),
    ("Spark", "pyspark", ("pyspark",)),
)
# Modules imported by one subprocess, in order: those sharing a heavy
# dependency (torch; TensorFlow, Keras's default backend) pay for it once.
PROBE_GROUPS: Sequence[Sequence[str]] = (
    ("torch", "pytorch_lightning", "lightning"), ("tensorflow", "keras"), ("jax",), ("ray",), ("pyspark",),
)

# One JSON line per module; an exception is an answer too, only a crash is not.
_IMPORT_PROBE = """\
import importlib, json, sys
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        info = {"version": str(getattr(module, "__version__", "") or "")}
        if name == "keras":
            info["backend"] = module.backend.backend()
        if name in ("tensorflow", "jax"):  # which way its collectives reach the engine
            from ring_strategy import _native_ops
            info["collectives"] = _native_ops.describe(name)
    except BaseException as e:
        info = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    print(json.dumps({name: info}), flush=True)
"""

_ENGINE_PROBE = """\
import json
from ring_strategy import _native
from ring_strategy.build_queries import gpu_info
print(json.dumps({"path": _native.__file__, "config": _native.config_table(),
                  "dtypes": sorted(_native.DTYPES), "ops": list(_native.REDUCE_OPS), "gpu": gpu_info()}))
"""


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the report.

    Attributes:
        available: Shown as ``[X]`` when true, ``[ ]`` when false.
        name: What the line is about.
        detail: Version, reason or remark.
    """

    available: bool
    name: str
    detail: str = ""

    def __str__(self) -> str:
        mark = "[X]" if self.available else "[ ]"
        return f"    {mark} {self.name:<18} {self.detail}".rstrip()


def _start_probe(code: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env,
    )


def _finish_probe(proc: subprocess.Popen, timeout: float) -> Tuple[List[Dict], str]:
    """Returns the JSON lines the probe printed, and why it printed no more ("" if it ended well)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        reason = f"the import did not finish within {timeout:g} s"
    else:
        last = [line.strip() for line in err.splitlines() if line.strip()]
        if proc.returncode < 0:
            reason = f"the import crashed (signal {-proc.returncode})"
        elif proc.returncode != 0:
            reason = last[-1] if last else f"exit code {proc.returncode}"
        else:
            reason = ""
    answers = []
    for line in out.splitlines():
        try:
            answers.append(json.loads(line))
        except ValueError:
            continue  # something the import printed
    return answers, reason


def installed_version(distributions: Sequence[str]) -> str:
    """The version of the first of ``distributions`` that is installed, or ""."""
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _framework_rows(timeout: float) -> List[Row]:
    """Imports every installed framework, the groups in parallel subprocesses."""
    installed = {m for _, m, _ in FRAMEWORKS if importlib.util.find_spec(m) is not None}
    probes = []
    for group in PROBE_GROUPS:
        modules = [m for m in group if m in installed]
        if modules:
            probes.append((modules, _start_probe(_IMPORT_PROBE, *modules)))
    infos: Dict[str, Dict] = {}
    for modules, proc in probes:
        answers, reason = _finish_probe(proc, timeout)
        for answer in answers:
            infos.update(answer)
        unanswered = [m for m in modules if m not in infos]
        for i, module in enumerate(unanswered):
            infos[module] = {"error": reason if i == 0 else f"not checked: importing {unanswered[0]} failed"}
    rows = []
    for name, module, distributions in FRAMEWORKS:
        if module not in installed:
            rows.append(Row(False, name, "not installed"))
            continue
        info = infos[module]
        version = info.get("version") or installed_version(distributions) or "(unknown version)"
        if "error" in info:
            rows.append(Row(False, name, f"{version}, but the import fails: {info['error']}"))
        elif module == "keras":
            rows.append(Row(True, name, f"{version} (backend: {info.get('backend', 'unknown')})"))
        elif "collectives" in info:
            rows.append(Row(True, name, f"{version} (collectives: {info['collectives']})"))
        else:
            rows.append(Row(True, name, version))
    return rows


def _shared_memory_row() -> Row:
    """Creates, maps and removes a small segment in /dev/shm, as the engine does."""
    path = f"/dev/shm/ring.check-build-{secrets.token_hex(4)}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return Row(False, "Shared memory", f"/dev/shm is not usable: {e.strerror or e}; "
                   "ranks of one host would need RING_TRANSPORT=tcp")
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        with mmap.mmap(fd, mmap.PAGESIZE) as view:
            view[:4] = b"ring"
        stats = os.statvfs("/dev/shm")
    except OSError as e:
        return Row(False, "Shared memory", f"/dev/shm cannot be mapped: {e.strerror or e}")
    finally:
        os.close(fd)
        os.unlink(path)
    free = stats.f_bavail * stats.f_frsize / 2**30
    detail = f"between ranks of one host (/dev/shm, {free:.1f} GiB free)"
    if values.parse_word(os.environ.get("RING_TRANSPORT", ""), ("tcp",)) == 0:
        detail += "; turned off here by RING_TRANSPORT=tcp"
    return Row(True, "Shared memory", detail)


def _tcp_row() -> Row:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
    except OSError as e:
        return Row(False, "TCP", f"cannot listen on a socket: {e.strerror or e}")
    return Row(True, "TCP", "between hosts (and between ranks of one host with RING_TRANSPORT=tcp)")


def _launcher_rows() -> List[Row]:
    rows = [Row(True, "ringrun", "this host; other hosts over ssh")]
    # The programs of this Python's environment first, as an activated venv would have it.
    search_path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    for name, program, role in (("ssh", "ssh", "ringrun -H across hosts"),
                                ("mpirun", "mpirun", "Open MPI / MPICH jobs"),
                                ("Slurm", "srun", "srun jobs"),
                                ("torchrun", "torchrun", "torchrun jobs")):
        path = shutil.which(program, path=search_path)
        rows.append(Row(path is not None, name, f"{role} ({path})" if path else "not found"))
    return rows


def _gpu_rows(gpu: Optional[Dict]) -> List[Row]:
    """The CUDA driver and NCCL, as the engine found them (build_queries.gpu_info)."""
    if gpu is None:
        return [Row(False, "CUDA", "the native engine is not loaded"), Row(False, "NCCL", "not searched for")]
    if not gpu["cuda_loaded"] or gpu["device_count"] == 0:
        cuda = Row(False, "CUDA", gpu["cuda_error"] or "no GPU")
    else:
        version = gpu["cuda_driver_version"]
        cuda = Row(True, "CUDA", f"driver {version // 1000}.{version % 1000 // 10}, {gpu['device_count']} GPU(s) "
                   f"({gpu['cuda_path']}); host-staged collectives on CUDA tensors")
    if gpu["nccl_loaded"]:
        nccl = Row(True, "NCCL", f"{gpu['nccl_version_text']} ({gpu['nccl_path']}, found: {gpu['nccl_source']})")
    else:
        nccl = Row(False, "NCCL", gpu["nccl_error"])
    return [cuda, nccl]


def _operation_rows(engine: Optional[Dict]) -> List[Row]:
    if engine is None:
        cpu = Row(False, "CPU ring", "the native engine is not loaded")
    else:
        cpu = Row(True, "CPU ring", f"{', '.join(engine['ops'])} on {len(engine['dtypes'])} dtypes")
    return [cpu, *_gpu_rows(engine.get("gpu") if engine else None)]


def check_build_report(timeout: float = PROBE_TIMEOUT_SECONDS) -> Tuple[List[str], bool]:
    """Builds the ``--check-build`` report.

    Args:
        timeout: Seconds each import may take.

    Returns:
        The lines, and whether the native engine could be loaded.
    """
    engine_probe = _start_probe(_ENGINE_PROBE)
    frameworks = _framework_rows(timeout)
    answers, reason = _finish_probe(engine_probe, timeout)
    engine = answers[-1] if answers and not reason else None
    lines = [f"ring v{ring_strategy.__version__}:", ""]
    if engine is not None:
        lines.append(f"Native engine: {engine['path']}")
    else:
        lines.append(f"Native engine: cannot be loaded ({reason}); run `make build`")
    lines += ["", "Available frameworks:", *map(str, frameworks)]
    lines += ["", "Available transports:", str(_shared_memory_row()), str(_tcp_row())]
    lines += ["", "Available launchers:", *map(str, _launcher_rows())]
    lines += ["", "Available tensor operations:", *map(str, _operation_rows(engine))]
    return lines, engine is not None


def print_check_build(stream: Optional[TextIO] = None) -> int:
    """Prints the ``--check-build`` report.

    Args:
        stream: Where to print; ``sys.stdout`` by default.

    Returns:
        0 when the native engine loads, else 1.
    """
    lines, engine_ok = check_build_report()
    out = stream or sys.stdout
    out.write("\n".join(lines) + "\n")
    out.flush()
    return 0 if engine_ok else 1
