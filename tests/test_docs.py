"""``docs/architecture.md`` stays a map: under 400 lines, and every path it names exists.

A path is named in two ways:

- in backticks, relative to the repository root: ```flavors/trail/decisions.py``` (a
  file: its last part has an extension) or ```governance/ensembles/``` (a folder: it
  ends in ``/``), starting with one of :data:`ROOTS`. A placeholder such as
  ``cli/<command>.py`` or a glob such as ``results_*.md`` is not a path and is skipped;
- in the folder tree, the fenced block whose info string is ``tree``: one entry a line,
  its name first, indented two spaces per level below its folder (``name/``).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 400
"""The map is read in 15 minutes; measurements go to ``examples/benchmarks/``."""
ROOTS = ("governance", "flavors", "cli", "tests", "examples", "docs")
PATH = re.compile(rf"(?:{'|'.join(ROOTS)})/[A-Za-z0-9_.\-/]*")
SPAN = re.compile(r"`([^`]+)`")
FENCE = "```"
TREE_INDENT = 2


def _is_path(text: str) -> bool:
    if not PATH.fullmatch(text) or "//" in text:
        return False
    return text.endswith("/") or "." in text.rsplit("/", 1)[-1].lstrip(".")


def _prose_and_blocks(lines: list) -> tuple:
    """The lines outside fenced blocks (fences blanked, so line numbers stay) and the
    fenced blocks as ``(info string, [(line number, line)])``."""
    prose, blocks, block = [], [], None
    for line in lines:
        stripped = line.strip()
        if block is None and stripped.startswith(FENCE):
            block = (stripped[len(FENCE) :].strip(), [])
            prose.append("")
        elif block is not None and stripped == FENCE:
            blocks.append(block)
            block = None
            prose.append("")
        elif block is not None:
            block[1].append((len(prose) + 1, line))
            prose.append("")
        else:
            prose.append(line)
    return prose, blocks


def backticked_paths(text: str) -> list:
    """``(line number, path)`` of every path named in backticks outside fenced blocks (a
    span may wrap onto the next line, as Markdown allows)."""
    prose, _ = _prose_and_blocks(text.splitlines())
    joined = "\n".join(prose)
    found = []
    for match in SPAN.finditer(joined):
        span = match.group(1).strip()
        if _is_path(span):
            found.append((joined.count("\n", 0, match.start()) + 1, span))
    return found


def tree_paths(text: str) -> list:
    """``(line number, path)`` of every entry of the ``tree`` blocks."""
    _, blocks = _prose_and_blocks(text.splitlines())
    found = []
    for info, block in blocks:
        if info != "tree":
            continue
        folders = []
        for number, line in block:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip(" "))
            level = indent // TREE_INDENT
            name = line.split()[0]
            if indent % TREE_INDENT or level > len(folders):
                found.append((number, f"{''.join(folders)}{name} (misindented tree entry)"))
                continue
            del folders[level:]
            found.append((number, "".join(folders) + name))
            if name.endswith("/"):
                folders.append(name)
    return found


def missing(paths: list, root: Path = ROOT) -> list:
    """The entries of ``paths`` that are not an existing file (or folder, for ``.../``)."""
    gone = []
    for number, path in paths:
        target = root / path
        exists = target.is_dir() if path.endswith("/") else target.is_file()
        if not exists:
            gone.append(f"  line {number}: {path}")
    return gone


def test_architecture_map_is_short():
    lines = DOC.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, (
        f"docs/architecture.md has {len(lines)} lines; the map must stay under {MAX_LINES}. "
        "Move measurements and their history to examples/benchmarks/results_*.md or the "
        "commit message, and keep each design reason to a sentence."
    )


def test_every_path_the_map_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = backticked_paths(text)
    listed = tree_paths(text)
    assert named, "docs/architecture.md names no path in backticks: did its format change?"
    assert listed, "docs/architecture.md has no ```tree block: did its format change?"
    gone = missing(named + listed)
    assert not gone, (
        f"docs/architecture.md names {len(gone)} path(s) that do not exist relative to "
        f"{ROOT} (rename them in the doc, or restore the file):\n" + "\n".join(gone)
    )
