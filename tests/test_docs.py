"""The README's and the docs' Python examples run, and print what the page says they print.

Every ```` ```python ```` block of ``README.md`` and ``docs/*.md`` is a test. It runs in a fresh
temporary directory, twice in a row, each time in a fresh namespace: the second run proves that
its saves do not fail on the files the first run left (a save replaces a file only when asked,
with ``.overwrite()`` or ``overwrite=True``). A block that imports an optional package (torch,
jax, safetensors...) or opens a URL (fsspec) is skipped, naming it, when it is not installed.

What a page shows a block printing is checked, in either of two spellings:

* a ``print(...)`` line whose trailing comment is what that line prints
  (``print(keep.matches("decoder.bias"))  # False``);
* a ```` ```text ```` block right after the Python block (blank lines between are allowed): the
  whole of what the block prints, for output too long for a comment.

A block that cannot run on its own (it needs a GPU, or shows a signature) is marked with
``<!-- not-run: <reason> -->`` on the line before its fence; its test is skipped with that
reason, so ``pytest -rs`` lists every block not run and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import doctest
import importlib.util
import io
import re
import sys
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNS = 2  # the second run meets the files the first one wrote

_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
# The optional packages a block may import (the extras and the dev oracles): a block importing
# one that is not installed is skipped, naming it. A block with a URL needs fsspec (the remote
# extra); every other block must run with the package's own dependencies alone.
OPTIONAL = ("torch", "jax", "flax", "safetensors", "fsspec", "huggingface_hub", "transformers")
_IMPORTS = re.compile(r"^\s*(?:import|from)\s+(\w+)", re.MULTILINE)
_URL = re.compile(r"[\"'](?:memory|s3|gs|https?)://")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced Python example: where it is, its code, and what the page says it prints."""

    page: str
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason given in a not-run marker, or None
    shown_output: str | None  # the text block right after it, or None

    @property
    def name(self) -> str:
        """``README.md:41``: a test id that leads to the block."""
        return f"{self.page}:{self.line}"


def _fenced(lines: list[str]) -> list[tuple[str, int, int]]:
    """Every fenced block as (language, fence line index, closing fence index)."""
    found, start, language = [], -1, ""
    for index, line in enumerate(lines):
        match = _FENCE.match(line)
        if match is None:
            continue
        if start < 0:
            start, language = index, match.group(1)
        else:
            found.append((language, start, index))
            start = -1
    return found


def _blocks_of(page: Path) -> list[Block]:
    return _blocks_of_file(page, ROOT)


def _blocks_of_file(page: Path, root: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    fenced = _fenced(lines)
    blocks = []
    for position, (language, start, end) in enumerate(fenced):
        if language != "python":
            continue
        marker = _NOT_RUN.match(lines[start - 1]) if start else None
        shown = None
        if position + 1 < len(fenced):
            next_language, next_start, next_end = fenced[position + 1]
            between = lines[end + 1 : next_start]
            if next_language == "text" and not any(line.strip() for line in between):
                shown = "\n".join(lines[next_start + 1 : next_end])
        code = "\n".join(lines[start + 1 : end]) + "\n"
        relative = page.relative_to(root).as_posix()
        reason = marker and marker.group("reason")
        blocks.append(Block(relative, start + 1, code, reason, shown))
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks_of(page)]


def _comment_outputs(code: str) -> dict[int, str]:
    """Line number -> the trailing comment of each line that is a ``print(...)`` call."""
    shown: dict[int, str] = {}
    first_on_line: dict[int, str] = {}
    layout = (tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.NEWLINE)
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        line = token.start[0]
        if token.type == tokenize.COMMENT and first_on_line.get(line) == "print":
            shown[line] = token.string.removeprefix("#").strip()
        elif token.type not in layout:
            first_on_line.setdefault(line, token.string)
    return shown


class _PrintRecorder:
    """Stands in for `print` in a block's namespace and files each call's text under the
    block line that made it."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.by_line: defaultdict[int, list[str]] = defaultdict(list)

    def __call__(
        self,
        *values: object,
        sep: str | None = " ",
        end: str | None = "\n",
        file: TextIO | None = None,
        flush: bool = False,
    ) -> None:
        if file is not None and file is not sys.stdout:
            print(*values, sep=sep, end=end, file=file, flush=flush)
            return
        text = (" " if sep is None else sep).join(map(str, values))
        sys.stdout.write(text + ("\n" if end is None else end))
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        if frame is not None:
            self.by_line[frame.f_lineno].append(text)


def _run(block: Block) -> tuple[str, _PrintRecorder]:
    """Run the block in a fresh namespace; what it printed, whole and line by line."""
    recorder = _PrintRecorder(f"<{block.name}>")
    namespace = {"__name__": "__main__", "print": recorder}
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(block.code, recorder.filename, "exec"), namespace)
    return stdout.getvalue(), recorder


def _lines(text: str) -> list[str]:
    """Lines without trailing spaces, and without the blank lines at the end."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _check(block: Block) -> None:
    """Run the block `RUNS` times in the current directory; each run must print what the page
    shows. Raises AssertionError (or the block's own error) on the first difference."""
    expected_by_line = _comment_outputs(block.code)
    for run in range(1, RUNS + 1):
        printed, recorder = _run(block)
        for line, expected in expected_by_line.items():
            found = "\n".join(recorder.by_line.get(line, []))
            where = f"{block.page}:{block.line + line}"
            assert found == expected, f"run {run}: {where} prints {found!r}, the page {expected!r}"
        if block.shown_output is not None:
            assert _lines(printed) == _lines(block.shown_output), f"run {run}: {block.name}"


def _absent_packages(code: str) -> list[str]:
    """The optional packages `code` needs (by its imports and URLs) that are not installed."""
    needed = {name for name in _IMPORTS.findall(code) if name in OPTIONAL}
    if _URL.search(code):
        needed.add("fsspec")
    return sorted(name for name in needed if importlib.util.find_spec(name) is None)


def test_a_block_needing_an_absent_package_is_told_apart() -> None:
    code = 'import numpy\nfrom safetensors.numpy import save_file\nopen("memory://m")\n'
    absent = _absent_packages(code)
    assert "numpy" not in absent
    assert ("safetensors" in absent) == (importlib.util.find_spec("safetensors") is None)
    assert ("fsspec" in absent) == (importlib.util.find_spec("fsspec") is None)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_block_runs_twice_and_prints_what_the_page_shows(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.not_run is not None:
        pytest.skip(f"not-run: {block.not_run}")
    absent = _absent_packages(block.code)
    if absent:
        pytest.skip(f"needs {', '.join(absent)}, not installed (an optional extra)")
    monkeypatch.chdir(tmp_path)
    _check(block)


def test_entry_docstring_example_runs() -> None:
    """`TensorEntry`'s docstring shows how to get a `DType`; its example must stay true."""
    from weightstore import entry

    assert doctest.testmod(entry, raise_on_error=True).attempted > 0


# -- the checker itself ------------------------------------------------------------------------

_PAGE = """\
Intro.

```python
print(1 + 1)  # 2
```

```text
2
```

<!-- not-run: needs a GPU -->
```python
print(undefined_name)
```
"""


def test_the_checker_reads_markers_and_output_and_catches_a_wrong_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.md"
    page.write_text(_PAGE, encoding="utf-8")
    shown, skipped = _blocks_of_file(page, tmp_path)
    assert (shown.line, shown.not_run, shown.shown_output) == (3, None, "2")
    assert (skipped.line, skipped.not_run) == (12, "needs a GPU")
    _check(shown)
    with pytest.raises(AssertionError, match="prints '2', the page '3'"):
        _check(dataclasses.replace(shown, code="print(1 + 1)  # 3\n"))
    with pytest.raises(AssertionError, match="run 1"):
        _check(dataclasses.replace(shown, shown_output="3"))
    refuses_to_replace = "open('f', 'x').close()\nprint(1 + 1)  # 2\n"  # as saves do
    with pytest.raises(FileExistsError):  # on the second run
        _check(dataclasses.replace(shown, code=refuses_to_replace))


def test_every_page_has_examples_and_every_marker_sits_on_a_python_block() -> None:
    """A not-run marker must sit right before a Python fence and give a reason; one anywhere
    else is a typo that would let a broken block run unnoticed or skip nothing."""
    assert {block.page for block in BLOCKS} >= {"README.md", "docs/stores.md"}
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if "not-run" not in line:
                continue
            marker = _NOT_RUN.match(line)
            assert marker and marker.group("reason"), f"{page.name}:{index + 1}: no reason"
            following = lines[index + 1] if index + 1 < len(lines) else ""
            assert following == "```python", f"{page.name}:{index + 1}: not before a block"
