"""The engine's run-time loading of the CUDA driver and NCCL
(native/gpu/cuda_driver.h, native/gpu/nccl.h), and the build queries and
``ringrun --check-build`` rows built on it, on a machine without a GPU.

Each case runs in a fresh interpreter: the libraries are searched for once
per process. The libraries it finds are this machine's (none) or the
stand-ins built from stub_cuda.c / stub_nccl.c.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from tests.gpu.stubs import build_stub
from tests.jobs import REPO_ROOT

# Only the build queries and the engine: no framework to import, so each probe is quick. The
# front ends export these same functions (their surface tests check it).
_PROBE = """\
import json
import ring_strategy.build_queries as hvd
from ring_strategy.runner.check_build import _gpu_rows
print(json.dumps({"info": hvd.gpu_info(), "nccl_built": hvd.nccl_built(), "cuda_built": hvd.cuda_built(),
                  "gpu_available": hvd.gpu_available(), "rows": [str(r) for r in _gpu_rows(hvd.gpu_info())]}))
"""


def _probe(**env: str) -> Dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("RING_NCCL", "RING_CUDA", "STUB_"))}
    full.update(env, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("gpu_stubs")
    return {
        "cuda": build_stub("stub_cuda.c", d, "libcuda_stub.so"),
        "cuda_no_device": build_stub("stub_cuda.c", d, "libcuda_nodev.so", ["STUB_NO_DEVICE"]),
        "cuda_no_memcpy": build_stub("stub_cuda.c", d, "libcuda_nomemcpy.so", ["STUB_OMIT_MEMCPY"]),
        "nccl": build_stub("stub_nccl.c", d, "libnccl_new.so"),
        "nccl_old": build_stub("stub_nccl.c", d, "libnccl_old.so", ["STUB_NCCL_VERSION=2708"]),
        "nccl_2_11": build_stub("stub_nccl.c", d, "libnccl_211.so", ["STUB_NCCL_VERSION=21104"]),
        "nccl_no_allreduce": build_stub("stub_nccl.c", d, "libnccl_noar.so", ["STUB_OMIT_ALLREDUCE"]),
    }


def test_queries_are_false_without_gpu_libraries() -> None:
    got = _probe()
    info = got["info"]
    assert got["nccl_built"] == 0 and got["cuda_built"] is False and got["gpu_available"] is False
    assert "libcuda.so.1" in info["cuda_error"] and "cannot be loaded" in info["cuda_error"]
    assert info["nccl_error"].startswith("no NCCL library found") and "libnccl.so.2" in info["nccl_error"]


def test_nccl_found_through_the_variable_reports_its_version(stubs) -> None:
    got = _probe(RING_NCCL_LIBRARY=str(stubs["nccl"]))
    info = got["info"]
    assert got["nccl_built"] == 22703 and info["nccl_version_text"] == "2.27.3"
    assert info["nccl_source"] == "RING_NCCL_LIBRARY" and info["nccl_path"] == str(stubs["nccl"])


@pytest.mark.parametrize("which, text", [
    ("nccl_old", "is version 2.7.8; ring needs 2.12.0 or newer"),
    ("nccl_2_11", "is version 2.11.4; ring needs 2.12.0 or newer"),
    ("nccl_no_allreduce", "lacks ncclAllReduce"),
])
def test_unusable_nccl_is_refused_with_the_reason(stubs, which: str, text: str) -> None:
    got = _probe(RING_NCCL_LIBRARY=str(stubs[which]))
    assert got["nccl_built"] == 0
    assert text in got["info"]["nccl_error"] and str(stubs[which]) in got["info"]["nccl_error"]


def test_missing_nccl_file_names_the_variable(tmp_path) -> None:
    missing = tmp_path / "nope" / "libnccl.so.2"
    got = _probe(RING_NCCL_LIBRARY=str(missing))
    assert got["info"]["nccl_error"].startswith(f"RING_NCCL_LIBRARY={missing} cannot be loaded")


def test_nccl_wheel_in_site_packages_is_found(stubs, tmp_path) -> None:
    lib = tmp_path / "site" / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(stubs["nccl"].read_bytes())
    code = f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r})\n" + _PROBE
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_NCCL", "RING_CUDA"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=120).stdout
    info = json.loads(out.strip().splitlines()[-1])["info"]
    assert info["nccl_source"] == "wheel" and info["nccl_path"] == str(lib / "libnccl.so.2")


def test_cuda_driver_with_a_device(stubs) -> None:
    got = _probe(RING_CUDA_DRIVER_LIBRARY=str(stubs["cuda"]), STUB_CUDA_DEVICES="2")
    info = got["info"]
    assert got["cuda_built"] is True and got["gpu_available"] is True
    assert info["device_count"] == 2 and info["cuda_driver_version"] == 12040 and info["cuda_error"] == ""


def test_cuda_driver_without_a_device_says_why(stubs) -> None:
    got = _probe(RING_CUDA_DRIVER_LIBRARY=str(stubs["cuda_no_device"]))
    assert got["cuda_built"] is True and got["gpu_available"] is False
    assert "found no usable GPU: error 100 (no CUDA-capable device is detected)" in got["info"]["cuda_error"]


def test_cuda_driver_lacking_a_function_is_refused(stubs) -> None:
    got = _probe(RING_CUDA_DRIVER_LIBRARY=str(stubs["cuda_no_memcpy"]))
    assert got["cuda_built"] is False
    assert got["info"]["cuda_error"].endswith("lacks cuMemcpyAsync")


def test_check_build_rows_say_what_was_found(stubs) -> None:
    """The CUDA and NCCL rows of ``ringrun --check-build`` (tests/test_check_build.py runs the
    whole report on this machine, where neither is found)."""
    got = _probe(RING_NCCL_LIBRARY=str(stubs["nccl"]), RING_CUDA_DRIVER_LIBRARY=str(stubs["cuda"]))
    cuda, nccl = got["rows"]
    assert cuda.startswith("    [X] CUDA") and "driver 12.4, 1 GPU(s)" in cuda, cuda
    assert nccl.startswith("    [X] NCCL") and "2.27.3" in nccl and "found: RING_NCCL_LIBRARY" in nccl, nccl
    got = _probe(RING_NCCL_LIBRARY=str(stubs["nccl_old"]), RING_CUDA_DRIVER_LIBRARY=str(stubs["cuda_no_device"]))
    cuda, nccl = got["rows"]
    assert cuda.startswith("    [ ] CUDA") and "no CUDA-capable device" in cuda, cuda
    assert nccl.startswith("    [ ] NCCL") and "ring needs 2.12.0 or newer" in nccl, nccl


def test_device_check_script_is_ready_to_run() -> None:
    """tests/gpu/device_check.sh runs only on a GPU machine; here: it parses, and so does its worker."""
    here = Path(__file__).resolve().parent
    subprocess.run(["bash", "-n", str(here / "device_check.sh")], check=True)
    for worker in ("device_worker.py", "issue40_worker.py", "jax_gpu_worker.py", "keras_gpu_worker.py",
                   "xla_stream_worker.py"):
        subprocess.run([sys.executable, "-m", "py_compile", str(here / "workers" / worker)], check=True)
    assert os.access(here / "device_check.sh", os.X_OK)


def test_gpu_extra_is_the_only_one_with_cuda_packages() -> None:
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["gpu"]] == ["nvidia-nccl-cu12", "cupy-cuda12x"]
    cuda = ("nvidia-", "cupy", "cuda")
    for name, deps in extras.items():
        if name != "gpu":
            assert not [d for d in deps if d.startswith(cuda) or "gpu" in d], name


def test_gpu_settings_are_read_and_bad_values_named() -> None:
    from ring_strategy import _native

    assert _native.parse_config({})["gpu_operations"] == "nccl" and _native.parse_config({})["nccl_streams"] == 1
    got = _native.parse_config({"HOROVOD_GPU_OPERATIONS": "host", "RING_NUM_NCCL_STREAMS": "4"})
    assert got["gpu_operations"] == "host" and got["nccl_streams"] == 4
    for env, text in (({"RING_GPU_OPERATIONS": "mpi"}, "RING_GPU_OPERATIONS should be 'nccl' or 'host'. Got: 'mpi'"),
                      ({"HOROVOD_NUM_NCCL_STREAMS": "0"}, "HOROVOD_NUM_NCCL_STREAMS should be an integer from 1 to 16")):
        with pytest.raises(_native.BadArgumentError, match=text.replace("(", r"\(").replace(")", r"\)")):
            _native.parse_config(env)
