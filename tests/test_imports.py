"""Every module of the package imports first, alone, in a fresh interpreter:
no import cycle, no module that works only after another one was imported.

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
import subprocess
import sys
from pathlib import Path

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


def _module_level_imports(path, module):
    """Modules of PACKAGES that ``module`` imports when it is loaded (not in
    functions, not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            stack.extend(h for handler in getattr(node, "handlers", []) for h in handler.body)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def test_no_import_cycle_between_modules():
    paths = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            paths[".".join(parts)] = path
    graph = {m: _module_level_imports(p, m) & set(paths) - {m} for m, p in paths.items()}
    # A package's __init__ importing its own submodules is how packages work;
    # a cycle is modules importing each other, whichever is imported first.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    state, cycles = {}, []

    def visit(m, trail):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(" -> ".join(trail[trail.index(d):] + [d]))
            elif d not in state:
                visit(d, trail + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)
