"""One Horovod surface (ring_strategy/_surface.py): the names every front end
shares are listed once, each front end takes them all from there and adds only
its own, and docs/support.md, whose columns compare each front end with
Horovod's module for that framework, says every front end has them."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from test_support_doc import PAGE, _clauses, _rows

from ring_strategy import _surface

REPO_ROOT = Path(__file__).resolve().parents[1]
# Each Horovod-named front end: its package, and its column in docs/support.md.
FRONT_ENDS = {
    "ring_strategy.torch": ("ring_strategy/torch/__init__.py", "PyTorch", "torch"),
    "ring_strategy.tensorflow": ("ring_strategy/tensorflow/__init__.py", "TensorFlow", "tensorflow"),
    "keras_callbacks": ("keras_callbacks/__init__.py", "Keras 3", "keras"),
    "ring_strategy.mxnet": ("ring_strategy/mxnet/__init__.py", "MXNet", "mxnet"),
}


def test_the_surface_lists_each_name_once():
    assert len(_surface.__all__) == len(set(_surface.__all__)), _surface.__all__
    assert all(hasattr(_surface, n) for n in _surface.__all__)


def test_each_front_end_takes_the_whole_surface_and_repeats_none_of_it():
    shared = set(_surface.__all__)
    for package, (path, _, _) in FRONT_ENDS.items():
        tree = ast.parse((REPO_ROOT / path).read_text())
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        taken = {a.name for n in imports if n.module == "ring_strategy._surface" for a in n.names}
        assert taken == {"*"} or taken == shared, (package, shared ^ taken)
        again = sorted(a.asname or a.name for n in imports if n.module != "ring_strategy._surface"
                       for a in n.names if (a.asname or a.name) in shared)
        assert not again, f"{package} imports names of the shared surface from elsewhere: {again}"


def test_support_page_gives_every_front_end_the_surface():
    """Each shared name is one the page says every front end has: in its
    sentence on the process API and errors, or 'yes' in each Horovod
    front end's column; and the sentence names nothing beyond the surface."""
    text = PAGE.read_text()
    sentence = re.search(r"Every front end also has (.*?)\n\n", text, re.S).group(1)
    everywhere = set(re.findall(r"`([A-Za-z_]+)`", sentence))
    assert everywhere <= set(_surface.__all__), everywhere - set(_surface.__all__)
    yes = {}
    for clause in _clauses(_rows(text)):
        if clause["marker"] == "yes":
            yes.setdefault(clause["front_end"], set()).update(clause["names"])
    for _, column, _ in FRONT_ENDS.values():
        missing = set(_surface.__all__) - everywhere - yes.get(column, set())
        assert not missing, f"docs/support.md does not give {column} these shared names: {sorted(missing)}"


CHECK = """
import importlib, json, sys
from ring_strategy import _surface
wrong = {}
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    wrong[package] = [n for n in _surface.__all__ if getattr(module, n, None) is not getattr(_surface, n)]
print(json.dumps(wrong))
"""


def test_installed_front_ends_export_the_same_objects():
    import importlib.util

    packages = [p for p, (_, _, framework) in FRONT_ENDS.items() if importlib.util.find_spec(framework)]
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", CHECK, *packages], capture_output=True, text=True, timeout=240,
                          cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wrong = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not any(wrong.values()), wrong


def test_a_front_end_that_lists_its_names_lists_the_surface():
    for package, (path, _, _) in FRONT_ENDS.items():
        tree = ast.parse((REPO_ROOT / path).read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                listed = set(ast.literal_eval(node.value))
                assert set(_surface.__all__) <= listed, (package, set(_surface.__all__) - listed)
