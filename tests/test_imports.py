"""Every module of the package imports first, alone, in a fresh interpreter:
no module that works only after another one was imported. No import cycle
of any length, counting imports made inside functions, among the modules of
ring_strategy and keras_callbacks, nor among native/'s folders; the core and
the engine's folders import only downward, in the layer orders stated below.

The modules are found by walking ring_strategy/ and keras_callbacks/.
``__main__`` modules are skipped: importing one runs its command-line tool
(the benchmark, the timeline renderer), and importing its package is checked
anyway. keras_callbacks is imported on the JAX backend, where it must not
load TensorFlow; the host-call bridge must load no framework at all.
"""

import ast
import concurrent.futures
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["ring_strategy", "keras_callbacks"]
# Frameworks a module must not load when imported.
MUST_NOT_LOAD = {
    "ring_strategy._host_call": ["tensorflow", "jax", "torch", "keras"],
    "keras_callbacks": ["tensorflow"],
    "ring_strategy.keras": ["tensorflow"],
}
# Front ends whose framework cannot share this environment (MXNet 1.9.1 needs
# numpy < 1.24): skipped here when it is absent; tests/mxnet_frontend imports
# them in their own environment (`make mxnet-test`).
SEPARATE_ENVIRONMENT = {"ring_strategy.mxnet": "mxnet"}


def _modules():
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if "__pycache__" in parts or parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts)


def _framework_missing(module):
    return any(
        (module == prefix or module.startswith(prefix + ".")) and importlib.util.find_spec(framework) is None
        for prefix, framework in SEPARATE_ENVIRONMENT.items()
    )


def _forbidden(module):
    for prefix, frameworks in MUST_NOT_LOAD.items():
        if module == prefix or module.startswith(prefix + "."):
            return frameworks
    return []


# What a zygote (tests/workers/import_zygote.py) loads before it forks one
# child per module: the heavy frameworks, imported once instead of once per
# module. A module whose check forbids a framework goes to a zygote that has
# not loaded it. Each child has no module of PACKAGES loaded, so its import of
# its module is the first, as in a fresh interpreter.
PROFILES = {
    "bare": [],
    "keras": ["numpy", "jax", "keras"],
    "frameworks": ["numpy", "torch", "tensorflow", "keras", "pytorch_lightning", "lightning", "ray"],
}
ZYGOTE = REPO_ROOT / "tests" / "workers" / "import_zygote.py"


def _profile(module):
    forbidden = set(_forbidden(module))
    for name in ("frameworks", "keras", "bare"):
        if not forbidden & {p.split(".")[0] for p in PROFILES[name]}:
            return name
    raise AssertionError(module)


def _environment():
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _problem(module, error, loaded):
    if error:
        return f"{module}: import failed\n{error[-3000:]}"
    if loaded:
        return f"{module}: importing it loads {', '.join(loaded)}"
    return None


def _import_fresh(module):
    """Imports ``module`` in a fresh interpreter of its own."""
    code = f"import sys, {module}\nprint('loaded:', *sorted(m for m in {_forbidden(module)!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          cwd=REPO_ROOT, env=_environment())
    if proc.returncode != 0:
        return _problem(module, proc.stderr or f"exit status {proc.returncode}", [])
    loaded = proc.stdout.strip().splitlines()[-1].split()[1:] if proc.stdout.strip() else []
    return _problem(module, None, loaded)


def _import_each(profile, modules):
    """Problems of ``modules`` imported each first by one zygote of ``profile``;
    a child that timed out or died is tried again in a fresh interpreter."""
    watch = sorted({f for m in modules for f in _forbidden(m)})
    env = dict(_environment(), ZYGOTE_WATCH=",".join(watch))
    proc = subprocess.run([sys.executable, str(ZYGOTE), ",".join(PROFILES[profile]), *modules],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env)
    results = {r["module"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert proc.returncode == 0 and len(results) == len(modules), f"zygote {profile} failed:\n{proc.stderr[-3000:]}"
    problems = []
    for module in modules:
        r = results[module]
        if r["error"] in ("timed out", "the child died"):
            problems.append(_import_fresh(module))
        else:
            loaded = [f for f in r["loaded"] if f in _forbidden(module)]
            problems.append(_problem(module, r["error"], loaded))
    return [p for p in problems if p]


def test_every_module_imports_alone_in_a_fresh_interpreter():
    modules = [m for m in _modules() if not _framework_missing(m)]
    assert "ring_strategy.torch.autograd" in modules and "keras_callbacks._host" in modules, modules
    groups = {}
    for m in modules:
        groups.setdefault(_profile(m), []).append(m)
    # The frameworks' zygote has most of the work: two of it, one for each half.
    heavy = groups.pop("frameworks", [])
    jobs = [(name, ms) for name, ms in groups.items()] + [("frameworks", heavy[0::2]), ("frameworks", heavy[1::2])]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for ps in pool.map(lambda job: _import_each(*job), [j for j in jobs if j[1]]) for p in ps]
    assert not problems, "\n\n".join(problems)


# ---------------------------------------------------------------- cycles and layers
# An import made inside a function closes a cycle as surely as one at the
# top of a module (it only happens later), so every import counts here:
# module level, inside functions and classes, and importlib.import_module
# of a literal name. Only imports under ``if TYPE_CHECKING`` are left out.
#
# The layer order enforced for the Python core, lowest first: each module
# imports only modules of its own layer or below (the extension
# ring_strategy._native, not a .py file, is below everything).
FOUNDATION = ["ring_strategy.exceptions", "ring_strategy._contracts", "ring_strategy._config_values"]
CORE_LAYERS = [
    FOUNDATION,
    ["ring_strategy._core.rules", "ring_strategy._core.gpu_arrays"],
    ["ring_strategy._core.world"],
    ["ring_strategy._core.engine"],
    ["ring_strategy._core.handles"],
    ["ring_strategy._core.objects"],
    ["ring_strategy._core.registry"],
    ["ring_strategy._core.arrays"],
]
# The engine's folders (native/<folder>/, subfolders counted as their
# folder), lowest first: each includes headers of its own folder or below.
NATIVE = REPO_ROOT / "native"
NATIVE_LAYERS = ["common", "gpu", "reduce", "transport", "collectives", "engine", "frameworks", "bindings"]


def _imports(path, module):
    """Modules of PACKAGES that ``module`` imports, wherever the import is
    (module level or in a function), except under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
        stack.extend(ast.iter_child_nodes(node))
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _python_graph(root=REPO_ROOT):
    paths = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            paths[".".join(parts)] = path
    graph = {m: _imports(p, m) & set(paths) - {m} for m, p in paths.items()}
    # A package's __init__ importing its own submodules is how packages work;
    # a cycle is modules importing each other, whichever is imported first.
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _native_graph(root=NATIVE):
    """native/'s folders and the folders their files include headers of
    (native/tests/ left out: tests may include anything)."""
    graph = {}
    for path in root.rglob("*"):
        if path.suffix not in (".h", ".cc", ".cpp", ".cu") or path.relative_to(root).parts[0] == "tests":
            continue
        folder = path.relative_to(root).parts[0] if len(path.relative_to(root).parts) > 1 else "."
        deps = graph.setdefault(folder, set())
        for header in _INCLUDE.findall(path.read_text(errors="replace")):
            target = next((p for p in (root / header, path.parent / header) if p.exists()), None)
            if target is None:
                continue  # a system or third-party header
            parts = target.resolve().relative_to(root.resolve()).parts
            deps.add(parts[0] if len(parts) > 1 else ".")
        deps.discard(folder)
    return graph


def _cycles(graph):
    """Every strongly connected set of more than one node (Tarjan's), as sorted lists."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _shown(graph, cycle):
    return ", ".join(f"{m} -> {sorted(graph[m] & set(cycle))}" for m in cycle)


def test_no_import_cycle_between_modules():
    graph = _python_graph()
    cycles = _cycles(graph)
    assert not cycles, "\n".join(_shown(graph, c) for c in cycles)


def _upward(graph, layers):
    """Edges from a node of ``layers`` to a node of a higher layer or to one
    in no layer (something above them all)."""
    level = {m: i for i, members in enumerate(layers) for m in members}
    return [f"{m} -> {d}" for m in sorted(level) for d in sorted(graph.get(m, ())) if level.get(d, len(layers)) > level[m]]


def test_core_layers_import_only_downward():
    graph = _python_graph()
    core = sorted(m for m in graph if m.startswith("ring_strategy._core."))
    placed = {m for members in CORE_LAYERS for m in members}
    assert set(core) <= placed, f"modules of ring_strategy._core with no layer in CORE_LAYERS: {set(core) - placed}"
    assert not _upward(graph, CORE_LAYERS), "\n".join(_upward(graph, CORE_LAYERS))


def test_no_include_cycle_between_native_folders():
    graph = _native_graph()
    cycles = _cycles(graph)
    assert not cycles, "\n".join(_shown(graph, c) for c in cycles)


def test_native_folders_include_only_downward():
    graph = _native_graph()
    assert set(graph) <= set(NATIVE_LAYERS), f"folders of native/ with no layer: {set(graph) - set(NATIVE_LAYERS)}"
    assert not _upward(graph, [[f] for f in NATIVE_LAYERS]), "\n".join(_upward(graph, [[f] for f in NATIVE_LAYERS]))


def test_the_checks_see_function_level_imports_and_native_includes(tmp_path):
    """The graphs are built as documented: an import inside a function
    counts, one under TYPE_CHECKING does not; a folder's include of another
    folder's header is an edge."""
    pkg = tmp_path / "ring_strategy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from ring_strategy import b\n")
    (pkg / "b.py").write_text("import importlib\nimportlib.import_module('ring_strategy.a')\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ring_strategy import a\n")
    (tmp_path / "keras_callbacks").mkdir()
    graph = _python_graph(tmp_path)
    assert _cycles(graph) == [["ring_strategy.a", "ring_strategy.b"]] and graph["ring_strategy.c"] == set()
    native = tmp_path / "native"
    for folder, text in {"common": '#include "engine/x.h"\n', "engine": '#include "common/y.h"\n'}.items():
        (native / folder).mkdir(parents=True)
    (native / "common" / "y.h").write_text('#include "engine/x.h"\n')
    (native / "engine" / "x.h").write_text('#include "common/y.h"\n#include <vector>\n')
    assert _native_graph(native) == {"common": {"engine"}, "engine": {"common"}}
