"""The docs keep up with the code: every command and option is documented,
and the generated parts (docs/commands.md) are current."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from txdb.cli import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# Written docs: the README and docs/*.md, not the page generated from --help
# (which would make every option "documented").
WRITTEN = README + "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "commands.md")
COMMANDS = cli.list_commands(None)


def mentioned(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_in_the_readme(name):
    assert mentioned(README, f"txdb {name}"), f"`txdb {name}` is not in README.md"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_documented(name):
    """Each option of each command appears (in one of its spellings) in the README or docs/."""
    cmd = cli.get_command(None, name)
    missing = [p.opts[-1] for p in cmd.params if isinstance(p, click.Option)
               and not any(mentioned(WRITTEN, o) for o in p.opts + p.secondary_opts)]
    assert not missing, f"txdb {name}: {missing} not in README.md or docs/"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_its_section_in_the_reference(name):
    assert f"\n## txdb {name}\n" in (ROOT / "docs" / "commands.md").read_text()


@pytest.mark.parametrize("doc", ["docs/commands.md", "docs/catalog.md"])
def test_generated_docs_are_current(doc):
    """`cog --check`: the generated parts (every command's --help, the list of
    views) are what `cog -r` would write now."""
    r = subprocess.run([sys.executable, "-m", "cogapp", "--check", doc], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr) + f"\nrun: cog -r {doc}"


def test_the_rule_table_of_the_architecture_is_one_table():
    """docs/architecture.md's "Each rule has one home": every line from the
    header to the blank line after it is a row of three cells (a stray line
    ends a Markdown table there, and the rows after it show as text)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("| Rule | Its one home | Everyone else |\n", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()
    assert len(rows) > 20
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row.replace("`|`", ""))
        assert row.startswith("|") and row.endswith("|") and len(cells) == 5, row


def test_each_rule_home_names_code_that_exists():
    """The home column names a module of txdb/ and the functions, classes or
    constants it defines (a renamed function leaves the table wrong)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("| Rule | Its one home | Everyone else |\n", 1)[1].split("\n\n", 1)[0]
    for row in table.splitlines()[1:]:
        home = row.split("|")[2].strip()
        if home.startswith("SQL:"):
            continue
        m = re.match(r"`([\w/]+\.py)`((?:[\s,&(]*`\w+`)*)", home)
        assert m, row
        source = (ROOT / "txdb" / m.group(1)).read_text()
        for name in re.findall(r"`(\w+)`", m.group(2)):
            assert re.search(rf"^\s*(def|class) {name}\b|^{name}\s*[:=]", source, re.M), (m.group(1), name)


def _prose(text: str) -> str:
    """Markdown without its fenced code (a cog block's code included)."""
    return re.sub(r"```.*?```|<!-- \[\[\[cog.*?\]\]\] -->", "", text, flags=re.S)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings."""
    heads = re.findall(r"^#+ (.*)$", _prose(path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.name)
def test_every_link_between_the_docs_lands(page):
    """A relative link names a file that exists and, with `#anchor`, a
    heading of that page (a section moved to docs/ leaves no dead link)."""
    dead = []
    for url in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
        if re.match(r"[a-z]+:", url):
            continue
        name, _, anchor = url.partition("#")
        target = (page.parent / name).resolve() if name else page
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in _anchors(target)):
            dead.append(url)
    assert not dead, f"{page.name}: {dead}"


def test_the_readme_is_the_newcomers_page():
    """The README stays short and links every reference page of docs/, so
    what moved there is one click away."""
    assert README.count("\n") < 500, "README.md: move reference material to docs/"
    linked = {Path(u.split("#")[0]).name for u in re.findall(r"\]\(docs/([^)\s]+)\)", README)}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in linked]
    assert not missing, f"README.md links no {missing}"
