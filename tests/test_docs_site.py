"""The documentation site (mkdocs.yml) builds strictly: a broken link, a
README section a page names that is not there, or a docstring that does not
match its signature fails `make test`. Its generated tables hold every engine
setting and every ringrun flag, and the API reference documents the front
ends' public names."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def site_hooks():
    """docs/_hooks/site.py, loaded by path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "_hooks" / "site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_configuration_page_lists_every_setting_and_flag(site) -> None:
    from ring_strategy import _native
    from ring_strategy.runner.tuning_args import OPTIONS

    page = (site / "configuration" / "index.html").read_text()
    for name, alias, _default, _doc in _native.config_table():
        assert name in page and alias in page, name
    for option in OPTIONS:
        assert option.flag in page, option.flag
    assert "RING_GRADIENT_SCHEDULE" in page  # a front-end setting, from README's table


@pytest.mark.parametrize("page, names", [
    ("core", ["allreduce", "broadcast_object", "add_process_set", "PeerFailureError", "nccl_built"]),
    ("torch", ["DistributedOptimizer", "broadcast_parameters", "SyncBatchNorm"]),
    ("tensorflow", ["DistributedGradientTape", "allreduce"]),
    ("lightning", ["RingStrategy", "RingEnvironment"]),
    ("keras", ["DistributedOptimizer", "MetricAverageCallback"]),
])
def test_api_reference_documents_the_public_names(site, page: str, names) -> None:
    text = (site / "api" / page / "index.html").read_text()
    for name in names:
        assert f'id="{name}' in text or f">{name}<" in text, (page, name)


def test_readme_sections_become_pages_with_working_links(site) -> None:
    hooks = site_hooks()
    docs = ROOT / "docs"
    included = {name for page in docs.glob("*.md") for name in hooks.INCLUDE.findall(page.read_text())}
    assert included <= set(hooks.readme_sections()), included - set(hooks.readme_sections())
    text = (site / "pytorch" / "index.html").read_text()
    assert 'id="pytorch"' in text and "DistributedOptimizer" in text  # README's section, included
    # README's own links were rewritten for the site: docs/ pages by name, other files as text.
    md = hooks._relink("[a](docs/gpu.md#install) [b](examples/x.py) [c](#core-api)", docs, docs, True,
                       hooks.anchor_pages(docs, hooks.readme_sections()))
    assert md == "[a](gpu.md#install) b (`examples/x.py`) [c](core-api.md#core-api)", md
    guide = (site / "migrate-horovod" / "index.html").read_text()
    assert "horovod.torch" in guide and "ring_strategy.torch" in guide  # the generated diff
    with pytest.raises(ValueError, match="#no-such-heading"):
        hooks._relink("[x](#no-such-heading)", docs, docs, True, hooks.anchor_pages(docs, hooks.readme_sections()))
