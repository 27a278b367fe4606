"""MkDocs hooks of the documentation site (mkdocs.yml): the tables generated
from the code, so the site cannot drift from it, and README's sections as
site pages, so their text lives in one place.

- ``--8<-- "README.md:NAME"`` (a line of its own): README's section NAME,
  between its ``<!-- --8<-- [start:NAME] -->`` and ``[end:NAME]`` markers.
  Its links are made to work in the site: ``docs/x.md`` becomes ``x.md``,
  ``#anchor`` the site page that includes the README section holding that
  heading, and files outside docs/ (``examples/y.py``) plain code text.
- Links of docs pages to ``../README.md#anchor`` go to that anchor's page too.
- ``<!-- ring:settings -->``: one table of every setting: the engine's, from
  its own table (``_native.config_table()``), with the ringrun flags that set
  each (``ring_strategy.runner.tuning_args.OPTIONS``), then the variables
  README's configuration table documents that only front ends and launchers
  read.
- ``<!-- ring:diff BEFORE AFTER -->``: the change a user makes to migrate,
  as a unified diff between two scripts of examples/migration/ (module
  docstrings left out); tests/test_migration.py runs them.
A README section or anchor that is not there fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parents[2]
README_ROW = re.compile(r"^\| `((?:RING|HOROVOD)_[A-Z0-9_]+)`.*$", re.M)
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]*)(#[^)\s]*)?\)")


def _table(head: Sequence[str], rows: List[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def settings() -> str:
    """One table of every setting: the engine's (its own table, with the
    ringrun flags that set each), then those only front ends and launchers
    read (README's rows for them)."""
    from ring_strategy import _native
    from ring_strategy.runner.tuning_args import OPTIONS

    flags: Dict[str, List[str]] = {}
    for option in OPTIONS:
        flags.setdefault(option.variable, []).append(_code(option.flag))
    engine = _native.config_table()
    names = {name for name, _alias, _default, _doc in engine}
    stray = sorted(set(flags) - names)
    if stray:
        raise ValueError(f"ringrun flags set variables the engine does not read: {stray}")
    rows = [(_code(name), _code(alias), ", ".join(flags.get(name, [])), _code(default), doc)
            for name, alias, default, doc in engine]
    readme = (ROOT / "README.md").read_text()
    for m in README_ROW.finditer(readme):  # README's tables: (variable, default, meaning) or (variable, meaning)
        if m.group(1) in names:
            continue
        names.add(m.group(1))
        cells = [c.strip() for c in m.group(0).strip("|").split(" | ")]
        default, meaning = (cells[1], cells[2]) if len(cells) > 2 else ("", cells[1])
        rows.append((cells[0], "", "", default, meaning))
    return _table(("variable", "Horovod's name", "ringrun flag", "default", "meaning"), rows)


INCLUDE = re.compile(r'^--8<-- "README.md:([a-z-]+)"$', re.M)
MARKER = re.compile(r"^<!-- --8<-- \[(start|end):([a-z-]+)\] -->$", re.M)
HEADING = re.compile(r"^#{2,4} (.+)$", re.M)


def slug(title: str) -> str:
    """The anchor of a heading, as MkDocs' toc (and GitHub) make it."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def readme_sections() -> Dict[str, str]:
    """README's marked sections by name."""
    text = (ROOT / "README.md").read_text()
    sections, start = {}, {}
    for m in MARKER.finditer(text):
        if m.group(1) == "start":
            start[m.group(2)] = m.end()
        else:
            sections[m.group(2)] = text[start.pop(m.group(2)):m.start()].strip("\n")
    return sections


# README sections the site shows in another form, and where.
SHOWN_AS = {"configuration": "configuration.md"}


def anchor_pages(docs_dir: Path, sections: Dict[str, str]) -> Dict[str, str]:
    """README heading anchor -> the site page including the section (of
    ``sections``, readme_sections()) that holds it."""
    pages = {}
    for page in sorted(docs_dir.glob("*.md")):
        for name in INCLUDE.findall(page.read_text()):
            for title in HEADING.findall(sections.get(name, "")):
                pages.setdefault(slug(title), page.name)
    for name, page in SHOWN_AS.items():
        for title in HEADING.findall(sections[name]):  # the section's own heading among them
            pages.setdefault(slug(title), page)
    return pages


def _readme_link(anchor: str, anchors: Dict[str, str], where: str) -> str:
    if not anchor:
        return "index.md"
    page = anchors.get(anchor[1:])
    if page is None:
        raise ValueError(f"{where}: README has no section on the site with the anchor {anchor}")
    return page + anchor


def _relink(markdown: str, docs_dir: Path, page_dir: Path, from_readme: bool, anchors: Dict[str, str]) -> str:
    def fix(m: "re.Match[str]") -> str:
        text, target, anchor = m.group(1), m.group(2) or "", m.group(3) or ""
        if "://" in target or target.startswith("mailto:"):
            return m.group(0)
        if from_readme and not target:
            return f"[{text}]({_readme_link(anchor, anchors, 'README')})"
        if from_readme and target.startswith("docs/"):
            return f"[{text}]({target[len('docs/'):]}{anchor})"
        resolved = (page_dir / target).resolve() if not from_readme else (ROOT / target).resolve()
        if resolved == ROOT / "README.md":
            return f"[{text}]({_readme_link(anchor, anchors, str(page_dir))})"
        if resolved.is_relative_to(docs_dir.resolve()) and resolved.exists():
            return m.group(0)
        return text if text.startswith("`") else f"{text} (`{target}`)"

    return LINK.sub(fix, markdown)


DIFF = re.compile(r"<!-- ring:diff ([a-z_]+\.py) ([a-z_]+\.py) -->")
MIGRATION = ROOT / "examples" / "migration"


def without_docstring(source: str) -> List[str]:
    """The lines of a script after its module docstring."""
    import ast

    body = ast.parse(source).body
    first = body[0] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else None
    lines = source.splitlines()
    return lines[first.end_lineno:] if first else lines


def migration_diff(before_name: str, after_name: str) -> str:
    import difflib

    before, after = MIGRATION / before_name, MIGRATION / after_name
    for script in (before, after):
        if not script.exists():
            raise ValueError(f"no migration script examples/migration/{script.name}")
    lines = difflib.unified_diff(without_docstring(before.read_text()), without_docstring(after.read_text()),
                                 before_name, after_name, n=2, lineterm="")
    return "```diff\n" + "\n".join(lines) + "\n```"


SETTINGS = "<!-- ring:settings -->"
# README's sections and their anchors' pages, read once per build (on_pre_build).
_build: Dict[str, Dict[str, str]] = {}


def on_pre_build(config) -> None:
    _build["sections"] = readme_sections()
    _build["anchors"] = anchor_pages(Path(config["docs_dir"]), _build["sections"])


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    docs_dir = Path(config["docs_dir"])
    sections, anchors = _build["sections"], _build["anchors"]
    page_dir = (docs_dir / page.file.src_path).parent.resolve()

    def include(m: "re.Match[str]") -> str:
        if m.group(1) not in sections:
            raise ValueError(f"{page.file.src_path}: README has no section marked {m.group(1)!r}")
        return _relink(sections[m.group(1)], docs_dir, page_dir, True, anchors)

    markdown = _relink(markdown, docs_dir, page_dir, False, anchors)
    markdown = INCLUDE.sub(include, markdown)
    if SETTINGS in markdown:
        markdown = markdown.replace(SETTINGS, _relink(settings(), docs_dir, page_dir, True, anchors))
    return DIFF.sub(lambda m: migration_diff(m.group(1), m.group(2)), markdown)
