"""Builds ring's TensorFlow op library against the installed TensorFlow.

Custom TensorFlow ops are tied to the TensorFlow they were compiled against
(its headers, C++ ABI and ``libtensorflow_framework``), so the library is
compiled where it is used, with ``tf.sysconfig``'s flags:

- at install time, when TensorFlow is present (CMake runs this file as a
  script: ``python _op_build.py --into DIR``), into the package as
  ``_tf_ops_<TensorFlow version>.so``;
- otherwise on first use, into a per-user cache keyed by the TensorFlow and
  ring versions and the sources' hash (``cached_library``), with one line on
  stderr saying so. DeepSpeed's op builder and torch's ``cpp_extension.load``
  work this way.

The XLA lowering (``XLA_SOURCES``: ``jit_compile=True``) needs TensorFlow's
XLA headers and ``libtensorflow_cc``; when it does not compile, or with
``RING_TF_XLA=0``, the library is built without it and says so in one line
(``jit_compile`` then raises ring's clear error). The sources compile in
parallel, one process each.

This module imports only the standard library at the top (and TensorFlow
when asked), so CMake can run it before ring's extension exists. The
compile and link commands live in :func:`compile_command` and
:func:`link_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional

# The sources, relative to the engine's source root (native/ in a checkout,
# ring_strategy/_native_src in an installed wheel).
TF_SOURCES = ("frameworks/tensorflow/ops.cc", "frameworks/tensorflow/kernels.cc")
XLA_SOURCES = ("frameworks/tensorflow/xla_kernels.cc", "frameworks/xla/collective_ffi.cc",
               "frameworks/xla/collective_call.cc")
_MISSING = "frameworks/tensorflow/missing_headers"  # see its README.md
TF_HEADERS = ("frameworks/engine_api.h", "common/types.h", "common/error.h", "frameworks/xla/collective_ffi.h",
              "frameworks/xla/collective_call.h",
              f"{_MISSING}/farmhash.h", f"{_MISSING}/highwayhash/arch_specific.h",
              f"{_MISSING}/highwayhash/hh_types.h", f"{_MISSING}/highwayhash/highwayhash.h")
_PACKAGE = Path(__file__).resolve().parent
# ring_strategy.__version__, read without importing the package (part of the cache key)
RING_VERSION = re.search(r'^__version__ = "([^"]+)"', (_PACKAGE / "__init__.py").read_text(), re.M).group(1)


class BuildError(RuntimeError):
    """The library cannot be built here; the message says why."""


def source_root() -> Path:
    """The folder holding ``TF_SOURCES`` and ``TF_HEADERS``."""
    for root in (_PACKAGE.parent / "native", _PACKAGE / "_native_src"):
        if all((root / f).is_file() for f in TF_SOURCES + XLA_SOURCES + TF_HEADERS):
            return root
    raise BuildError("the op library's C++ sources are not installed with ring")


def sources_hash(root: Path) -> str:
    h = hashlib.sha256()
    for f in TF_SOURCES + XLA_SOURCES + TF_HEADERS:
        h.update(f.encode() + b"\0" + (root / f).read_bytes())
    return h.hexdigest()[:16]


def library_name(tf_version: str) -> str:
    """The file name of the library built for this TensorFlow."""
    return f"_tf_ops_{tf_version}.so"


def compiler() -> str:
    """The C++ compiler ($CXX, else c++ or g++ on PATH)."""
    for cxx in (os.environ.get("CXX"), "c++", "g++"):
        if cxx and shutil.which(cxx):
            return cxx
    raise BuildError("no C++ compiler found (set CXX, or install g++)")


def compile_command(src: str, obj: Path, root: Path) -> List[str]:
    """The command that compiles source ``src`` (relative to ``root``) into ``obj``."""
    import tensorflow as tf

    include = Path(tf.sysconfig.get_include())
    if not (include / "tensorflow" / "core" / "framework" / "op_kernel.h").is_file():
        raise BuildError(f"TensorFlow {tf.__version__} has no C++ headers at {include}")
    cflags = list(tf.sysconfig.get_compile_flags())
    if tf.test.is_built_with_cuda():
        cflags.append("-DGOOGLE_CUDA=1")
    if src in XLA_SOURCES:
        cflags += ["-idirafter", str(root / _MISSING)]
    return ([compiler(), "-c", "-fPIC", "-O2", "-w", "-std=c++17"] + cflags + [f"-I{root}", str(root / src), "-o",
                                                                               str(obj)])


def link_command(objs: List[Path], out: Path, xla: bool) -> List[str]:
    """The command that links ``objs`` into the library ``out`` (with
    TensorFlow's XLA library when the lowering is among them)."""
    import tensorflow as tf

    libs = list(tf.sysconfig.get_link_flags())
    if xla:
        libs += [f"-L{Path(tf.__file__).parent}", "-l:libtensorflow_cc.so.2"]
    return [compiler(), "-shared", "-fPIC"] + [str(o) for o in objs] + ["-o", str(out)] + libs


def _with_xla() -> bool:
    """False when ``RING_TF_XLA=0`` leaves the XLA lowering out."""
    return os.environ.get("RING_TF_XLA", "1") != "0"


def _run_all(cmds: List[List[str]]) -> List[subprocess.CompletedProcess]:
    """Runs the commands at once; their results, in order."""
    try:
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    except OSError as e:
        raise BuildError(f"the compiler could not run: {e}") from None
    done = []
    for c, p in zip(cmds, procs):
        out, err = p.communicate()
        done.append(subprocess.CompletedProcess(c, p.returncode, out, err))
    return done


def _failure(what: str, done: subprocess.CompletedProcess) -> str:
    tail = "\n".join(done.stderr.strip().splitlines()[-15:])
    return f"{what} failed ({done.args[0]} exit {done.returncode}):\n{tail}"


def build(out: Path, root: Optional[Path] = None) -> Path:
    """Compiles the library into ``out`` (written whole, then renamed)."""
    root = root or source_root()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    sources = list(TF_SOURCES) + (list(XLA_SOURCES) if _with_xla() else [])
    with tempfile.TemporaryDirectory(dir=out.parent) as objdir:
        objs = [Path(objdir) / (Path(src).stem + ".o") for src in sources]
        compiled = _run_all([compile_command(src, obj, root) for src, obj in zip(sources, objs)])
        for src, done in zip(sources, compiled):
            if done.returncode != 0 and src in TF_SOURCES:
                raise BuildError(_failure("compiling the TensorFlow ops", done))
        xla = all(d.returncode == 0 for d in compiled[len(TF_SOURCES):]) and len(sources) > len(TF_SOURCES)
        if not xla and len(sources) > len(TF_SOURCES):
            failed = next(d for d in compiled[len(TF_SOURCES):] if d.returncode != 0)
            print(f"ring: the TensorFlow ops are built without their XLA lowering (jit_compile=True): "
                  f"{_failure('compiling it', failed).splitlines()[0]}", file=sys.stderr, flush=True)
        linked = _run_all([link_command(objs if xla else objs[:len(TF_SOURCES)], tmp, xla)])[0]
        if linked.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise BuildError(_failure("linking the TensorFlow ops", linked))
    os.replace(tmp, out)
    return out


def cache_root() -> Path:
    """$RING_CACHE_DIR, else $XDG_CACHE_HOME/ring_strategy, else ~/.cache/ring_strategy."""
    if os.environ.get("RING_CACHE_DIR"):
        return Path(os.environ["RING_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ring_strategy"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``folder`` (the ranks of a host build once)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached_library(tf_version: str) -> Path:
    """The library for this TensorFlow in the per-user cache, built there
    first when missing or when its stamp (TensorFlow and ring versions, the
    sources' hash) differs from what is installed now."""
    root = source_root()
    stamp = {"tensorflow": tf_version, "ring": RING_VERSION, "sources": sources_hash(root), "xla": _with_xla()}
    folder = cache_root() / "tf-ops" / f"ring{RING_VERSION}-tf{tf_version}"
    lib = folder / library_name(tf_version)
    with _locked(folder):
        stamp_file = folder / "stamp.json"
        try:
            current = json.loads(stamp_file.read_text()) if lib.exists() else None
        except (OSError, ValueError):
            current = None
        if current != stamp:
            why = "first use" if current is None else f"built for {current}, not {stamp}"
            print(f"ring: building the TensorFlow ops for TensorFlow {tf_version} into {folder} ({why})",
                  file=sys.stderr, flush=True)
            build(lib, root)
            with tempfile.NamedTemporaryFile("w", dir=folder, delete=False) as f:
                json.dump(stamp, f)
            os.replace(f.name, stamp_file)
    return lib


def main(argv: Optional[List[str]] = None) -> int:
    """Install-time build: ``python _op_build.py --into DIR`` writes
    ``DIR/_tf_ops_<version>.so``; without TensorFlow it says so and succeeds.
    ``--inputs`` prints the files the build reads instead (the Makefile's
    prerequisites), one per line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--into", help="the folder of the built library (ring_strategy/)")
    p.add_argument("--stamp", help="a file touched when done (the build system's output)")
    p.add_argument("--inputs", action="store_true", help="print the files the build reads, and build nothing")
    args = p.parse_args(argv)
    if args.inputs:
        root = source_root()
        print("\n".join([__file__] + [str(root / f) for f in TF_SOURCES + XLA_SOURCES + TF_HEADERS]))
        return 0
    if not args.into:
        p.error("--into is required")
    try:
        import tensorflow as tf
    except ImportError:
        print("ring: TensorFlow is not installed: its ops will be built on first use", file=sys.stderr)
    else:
        try:
            out = build(Path(args.into) / library_name(tf.__version__))
            print(f"ring: built {out}", file=sys.stderr)
        except BuildError as e:
            print(f"ring: the TensorFlow ops were not built ({e}); they will be tried again on first use",
                  file=sys.stderr)
    if args.stamp:
        Path(args.stamp).touch()
    return 0


if __name__ == "__main__":
    # Run as a script, this folder is sys.path[0]: its tensorflow/ would
    # shadow TensorFlow itself.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _PACKAGE]
    sys.exit(main())
