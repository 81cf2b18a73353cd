"""The format record holds every format fact: each registered record gives every field, and
what the fields claim is what the format's code does.

Adding a format is one folder and one line in the registry only if nothing else keeps a copy
of a fact, so these tests also hold the code above the containers to asking the record (no
comparison with a format's name outside its own folder) and the summarizer to loading only
when a command runs.
"""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    op_dict,
    op_storage,
    op_str,
    op_tensor,
    pickle_of,
    write_zip,
)
from weightstore import burnpack, formats, gguf, safetensors
from weightstore.container._format import ContainerFormat
from weightstore.entry import TensorEntry
from weightstore.sets import LAYOUTS, layout_for

_FORMAT_FIELDS = ContainerFormat._FIELDS  # the record's fields, in declaration order

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "weightstore"
WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)

# The fields a record may set to None, and why None is a real answer there (every other field
# must hold a value: a string, tuple or set that is not empty, a callable, a bool).
MAY_BE_NONE = {
    "default_extension": "the format takes paths as written (SafeTensors, PyTorch)",
    "open_bytes": "the reader cannot read from memory (PyTorch maps or reads a file)",
    "open_static": "the reader cannot view a caller's buffer in place (PyTorch)",
    "writer": "the format is read only (PyTorch: weightstore never writes pickles)",
    "set_layout": "the format has no sharded sets (a single-file format such as GGUF)",
    "find_in_directory": "its directories hold sets, found by set_layout (all but GGUF)",
    "native_framework": "many frameworks write the format (burnpack, SafeTensors)",
}
BOOLEAN_FIELDS = (
    "holds_foreign_objects",
    "carries_framework_metadata",
    "reader_releases_pages",
)


def _empty_fields(fmt: ContainerFormat) -> list[str]:
    """The fields of `fmt` that hold no answer: unset, None where None is not allowed, an
    empty string, tuple or set, or a non-bool where a yes/no is asked."""
    return [field for field in _FORMAT_FIELDS if _is_empty(field, getattr(fmt, field, _UNSET))]


def _is_empty(field: str, value: object) -> bool:
    if value is _UNSET or (value is None and field not in MAY_BE_NONE):
        return True
    if field in BOOLEAN_FIELDS:
        return not isinstance(value, bool)
    return isinstance(value, str | tuple | frozenset) and not value


_UNSET = object()


def _fields_of(fmt: ContainerFormat) -> dict[str, Any]:
    return {field: getattr(fmt, field) for field in _FORMAT_FIELDS}


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda fmt: fmt.name)
def test_every_registered_record_gives_every_field(fmt: ContainerFormat) -> None:
    assert _empty_fields(fmt) == []


def test_the_check_catches_an_empty_field() -> None:
    """The check above is not vacuous: a record with an empty summarizer, no layout type and a
    None where None means nothing is caught field by field."""
    fields = _fields_of(safetensors.FORMAT)
    bad = ContainerFormat(**{**fields, "summarizer": "", "title": None, "extensions": ()})
    assert _empty_fields(bad) == ["title", "extensions", "summarizer"]
    not_bool = ContainerFormat(**{**fields, "holds_foreign_objects": None})
    assert _empty_fields(not_bool) == ["holds_foreign_objects"]


@pytest.mark.parametrize("field", _FORMAT_FIELDS)
def test_a_record_cannot_leave_a_field_out(field: str) -> None:
    fields = _fields_of(burnpack.FORMAT)
    del fields[field]
    with pytest.raises(TypeError, match=field):
        ContainerFormat(**fields)


def test_every_field_is_a_keyword_without_a_default() -> None:
    parameters = list(inspect.signature(ContainerFormat).parameters.values())
    assert [p.name for p in parameters] == list(_FORMAT_FIELDS)
    assert all(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in parameters)


def test_the_record_is_immutable_and_slotted() -> None:
    fmt = burnpack.FORMAT
    assert ContainerFormat.__slots__ == _FORMAT_FIELDS and not hasattr(fmt, "__dict__")
    with pytest.raises(AttributeError, match="immutable"):
        fmt.summarizer = "elsewhere:summarize"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del fmt.set_layout  # type: ignore[misc]


# -- what the fields claim is what the format's code does --------------------------------------


def _small_file(fmt: ContainerFormat, tmp_path: Path) -> Path:
    """A one-tensor file of `fmt`, written without torch."""
    entries = [TensorEntry.from_array("w", WEIGHT)]
    if fmt is burnpack.FORMAT:
        path = tmp_path / "m.bpk"
        burnpack.write_file(path, entries)
        return path
    if fmt is safetensors.FORMAT:
        path = tmp_path / "m.safetensors"
        safetensors.write_file(path, entries)
        return path
    if fmt is gguf.FORMAT:
        path = tmp_path / "m.gguf"
        gguf.GgufWriter(entries).save(path)
        return path
    tensor = op_tensor(op_storage("0", WEIGHT.size), 0, WEIGHT.shape, (3, 1))
    return write_zip(tmp_path / "m.pt", pickle_of(op_dict([(op_str("w"), tensor)])),
                     {"0": WEIGHT.tobytes()})  # fmt: skip


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda fmt: fmt.name)
def test_the_summarizer_resolves_and_reports_its_format(
    fmt: ContainerFormat, tmp_path: Path
) -> None:
    summarize = fmt.load_summarizer()
    module, _, name = fmt.summarizer.partition(":")
    assert (summarize.__module__, summarize.__name__) == (module, name)
    report = summarize(str(_small_file(fmt, tmp_path)), {})
    assert report.format == fmt.name and [row.name for row in report.tensors] == ["w"]
    assert (report.scan is not None) == fmt.holds_foreign_objects  # the objects scan ran


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda fmt: fmt.name)
def test_reader_capabilities_are_what_the_record_says(fmt: ContainerFormat, tmp_path: Path) -> None:
    with fmt.open_file(_small_file(fmt, tmp_path)) as reader:
        assert callable(getattr(reader, "release", None)) == fmt.reader_releases_pages
        assert callable(getattr(reader, "load_object", None)) == fmt.holds_foreign_objects


def test_listing_the_formats_imports_no_summarizer() -> None:
    modules = sorted({fmt.summarizer.partition(":")[0] for fmt in formats.FORMATS})
    probe = (
        "import json, sys\n"
        "from weightstore.formats import FORMATS\n"
        "named = [(fmt.name, fmt.summarizer, fmt.set_layout) for fmt in FORMATS]\n"
        "listed = sorted(name for name in sys.modules if name.startswith('weightstore.cli'))\n"
        "FORMATS[0].load_summarizer()\n"
        f"print(json.dumps([listed, [m in sys.modules for m in {modules!r}]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    listed, loaded_after_use = json.loads(done.stdout)
    assert listed == []  # neither the summarizers nor anything else of the command line
    assert any(loaded_after_use)  # and the probe does see a summarizer once one is used


# -- set layouts ------------------------------------------------------------------------------


def test_set_layouts_come_from_the_records_in_search_order() -> None:
    with_sets = [fmt for fmt in formats.FORMATS if fmt.set_layout is not None]
    assert {layout.format_name for layout in LAYOUTS} == {fmt.name for fmt in with_sets}
    for fmt in with_sets:
        assert fmt.set_layout is not None
        assert layout_for(fmt.name) is fmt.set_layout  # the record's, not a copy
        assert fmt.set_layout.format_name == fmt.name
        assert fmt.set_layout.extension in fmt.extensions
    # A Hugging Face repository often holds a SafeTensors and a .bin set: the safe one wins.
    assert [layout.format_name for layout in LAYOUTS] == ["safetensors", "burnpack", "pytorch"]
    assert len({layout.search_rank for layout in LAYOUTS}) == len(LAYOUTS)


def test_a_set_layout_pickles_as_its_fields() -> None:
    layout = layout_for("safetensors").replace(stem="diffusion_pytorch_model")
    assert pickle.loads(pickle.dumps(layout)) == layout


# -- nothing above the containers keeps a copy of a format fact -------------------------------

# Where a format's name may be compared with a string: the format's own folder, and the
# registry that looks names up.
NAME_COMPARISONS_ALLOWED = ("burnpack/", "safetensors/", "pytorch_reader/", "formats.py")


def _name_comparisons(tree: ast.AST, names: set[str]) -> Iterator[int]:
    """Lines comparing something with a format's name: ``== "pytorch"``, ``in {"safetensors"}``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            literals = (
                operand.elts if isinstance(operand, ast.Set | ast.Tuple | ast.List) else [operand]
            )
            if any(isinstance(lit, ast.Constant) and lit.value in names for lit in literals):
                yield node.lineno


def test_no_code_outside_a_format_folder_compares_format_names() -> None:
    names = {fmt.name for fmt in formats.FORMATS}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(NAME_COMPARISONS_ALLOWED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{relative}:{line}" for line in _name_comparisons(tree, names)]
    assert found == [], "ask the format record (ContainerFormat) instead"
