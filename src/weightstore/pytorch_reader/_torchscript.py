"""TorchScript archives (`torch.jit.save`): a scripted or traced module's parameters and buffers,
named as ``torch.jit.load(f).state_dict()`` names them, with nothing in the archive run.

A TorchScript archive is the zip layout of `_layout` with the module's compiled code beside it::

    <archive>/data.pkl               the module object graph (below); tensors are persistent
                                     ids into data/, exactly as in a torch.save checkpoint
    <archive>/data/<key>             the storages
    <archive>/code/__torch__.py      TorchScript source of the classes of ``__torch__``
    <archive>/code/__torch__/a/b.py  ... of ``__torch__.a.b`` (also ``.../___torch_mangle_3.py``)
    <archive>/code/**.py.debug_pkl   source ranges for torch's error messages
    <archive>/constants.pkl          values the code uses as constants (tensors in constants/)
    <archive>/traced_inputs.pkl      torch.jit.trace's example inputs (recent torch)
    <archive>/bytecode.pkl           lite-interpreter archives (``_save_for_lite_interpreter``)
    <archive>/extra/<name>           ``_extra_files``
    <archive>/version, byteorder, .data/serialization_id    as in torch.save

Only data.pkl, data/ and the class declarations in code/ are read. data.pkl holds one object
per module: ``GLOBAL '__torch__.torch.nn.modules.linear Linear'``, NEWOBJ, then BUILD with a
dict of the module's attributes in slot order: tensors, submodules and whatever else it keeps
(``training``, numbers, lists); the machine records each as an `InertObject`. Whether an
attribute is a parameter, a buffer or a submodule is not in the pickle but in the class's type,
which torch rebuilds by compiling code/. Each class there opens with its declarations::

    class BatchNorm1d(Module):
      __parameters__ = ["weight", "bias", ]
      __buffers__ = ["running_mean", "running_var", "num_batches_tracked", ]
      weight : Tensor
      running_mean : Tensor
      __annotations__["0"] = Tensor      (a name that is no identifier: ParameterList items)
      def forward(self: ...

and those lines are all this module reads of it, matched as text by regular expressions: the
code is never compiled, imported or run. torch writes the names between the quotes verbatim.
A file is streamed: its bytes arrive a chunk at a time, and only lines at column 0 or indented
exactly two spaces reach Python (method bodies and blank lines are skipped inside `re`), so
parsing holds one chunk and one line, whatever the file's size; all code/ files read together
are bounded by ``max_code_size`` (`_zip`).
Then, as torch's slot policies decide (``ParameterPolicy``, ``BufferPolicy`` and
``ModulePolicy`` in ``torch/csrc/jit/api/module.h``):

* a parameter is an attribute listed in ``__parameters__`` that holds a tensor (a ``None``
  bias is skipped);
* a buffer is one listed in ``__buffers__`` whose declared type is ``Tensor`` (a buffer
  declared ``Optional[Tensor]`` is left out, as torch leaves it out). Non-persistent buffers
  are listed: a scripted module keeps no ``_non_persistent_buffers_set``, so its
  ``state_dict()`` has them. An archive written before torch printed ``__buffers__`` lists no
  buffers, as torch loading it today lists none;
* a submodule is an attribute holding an instance of a class declared ``class X(Module):``.
  TorchBind classes (``__torch__.torch.classes.*``, quantized packed weights) have no source
  and are never modules.

Each module gives its parameters, then its buffers, then its submodules, each group in slot
order: `module_state` returns that as nested dicts, which `_walk` names like any dict, so
``sub.lin.weight`` reads as in ``state_dict()`` and a tensor tied to two modules is listed
under both names. Submodules with no tensors are left out.

A module class that defines ``__getstate__``/``__setstate__`` pickles whatever its
``__getstate__`` returned, and only running its ``__setstate__`` would say which attribute gets
which value. Its declared ``Tensor`` parameters and buffers are listed by name as unreadable
(`UnreadableTensor`: touching one raises `UnsupportedObjectError`); submodules inside such a
state are refused with that error at open.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import ArchiveError, LimitExceeded, UnsupportedObjectError
from weightstore.pytorch_reader._layout import DATA_PKL, TORCHSCRIPT_MARKERS, Limits
from weightstore.pytorch_reader._objects import GlobalRef, InertObject, clip
from weightstore.pytorch_reader._tensors import LazyTensor, UnreadableTensor
from weightstore.pytorch_reader._walk import short_repr

__all__ = ["ClassHeader", "EntryReader", "module_state", "parse_class_headers"]

EntryReader = Callable[[str], Iterable[bytes] | None]
"""The bytes of an archive entry, named relative to ``<archive>/``, a chunk at a time; ``None``
when absent."""

CODE_FOLDER: Final = TORCHSCRIPT_MARKERS[1]  # "code/"
SCRIPT_ROOT: Final = "__torch__"  # every TorchScript class lives under this module
TORCHBIND_ROOT: Final = "__torch__.torch.classes"  # C++ classes: no source, never modules
_SHOWN_LEN: Final = 80  # characters of a file-supplied name shown in a message

# One line each, at column 0 or indented two spaces (method bodies sit deeper), as torch's
# printer writes them (`torch/csrc/jit/serialization/python_print.cpp`).
_CLASS_LINE: Final = re.compile(r"class ([A-Za-z_]\w*)(?:\(([A-Za-z_]\w*)\))?:")
_NAME_LIST_START: Final = re.compile(r"  (__parameters__|__buffers__) =")
_NAME_LIST_LINE: Final = re.compile(r'  (__parameters__|__buffers__) = \[((?:"[^"\n]*", )*)\]')
_LIST_ITEM: Final = re.compile(r'"([^"\n]*)", ')
_TENSOR_LINE: Final = re.compile(r'  (?:([A-Za-z_]\w*) : |__annotations__\["([^"\n]*)"\] = )Tensor')
# The lines that can change a header, searched for in a file's bytes: outside a class, the next
# class line; inside one, the next top-level statement (which ends the class) or declaration.
# Blank lines, method bodies and other statements never leave `re`.
_NEXT_CLASS: Final = re.compile(rb"^class [^\n]*", re.MULTILINE)
_NEXT_IN_CLASS: Final = re.compile(
    rb"^(?:[^ \n]|  (?:__parameters__|__buffers__|__annotations__\[|[A-Za-z_]\w* : Tensor$))"
    rb"[^\n]*",
    re.MULTILINE,
)


class ClassHeader(ValueRecord):
    """What a class's declarations in code/ say (see the module docstring).

    Attributes:
        is_module: declared ``class X(Module):``.
        parameters: the ``__parameters__`` names, in slot order.
        buffers: the ``__buffers__`` names, in slot order.
        tensor_typed: attributes whose declared type is exactly ``Tensor``.
    """

    is_module: bool
    parameters: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()
    tensor_typed: frozenset[str] = frozenset()


def parse_class_headers(
    chunks: Iterable[bytes], entry: str, path: str | None
) -> dict[str, ClassHeader]:
    """The classes a code/ file declares, by name, read as text (see the module docstring)
    from its bytes `chunks`, split anywhere.

    Raises:
        ArchiveError: a ``__parameters__`` or ``__buffers__`` line this reader cannot parse.
    """
    headers: dict[str, ClassHeader] = {}
    draft: _Draft | None = None
    for block in _whole_lines(chunks):
        position = 0
        while found := (_NEXT_CLASS if draft is None else _NEXT_IN_CLASS).search(block, position):
            position = found.end() + 1  # past its newline
            line = found[0].decode("utf-8", "replace")  # only ASCII lines matter; names compare
            if line[0] != " ":  # a top-level statement ends the class before it
                if draft is not None:
                    headers[draft.name] = draft.finish()
                match = _CLASS_LINE.fullmatch(line)
                draft = None if match is None else _Draft(match[1], match[2] == "Module")
            elif draft is not None:
                draft.read(line, entry, path)
    if draft is not None:
        headers[draft.name] = draft.finish()
    return headers


def _whole_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The text in `chunks` as blocks of whole lines (without the last newline of each);
    holds one chunk and one line at a time."""
    pending: list[bytes] = []  # the start of a line that continues in the next chunk
    for chunk in chunks:
        end = chunk.rfind(b"\n")
        if end < 0:
            pending.append(chunk)
            continue
        yield b"".join([*pending, chunk[:end]]) if pending else chunk[:end]
        pending = [chunk[end + 1 :]]
    yield b"".join(pending)


_MODULE_WITHOUT_DECLARATIONS: Final = ClassHeader(True)
_CLASS_WITHOUT_DECLARATIONS: Final = ClassHeader(False)


@dataclass(slots=True)
class _Draft:
    """A class header while its lines are read."""

    name: str
    is_module: bool
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tensor_typed: set[str] = field(default_factory=set)

    def read(self, line: str, entry: str, path: str | None) -> None:
        listed = _NAME_LIST_LINE.fullmatch(line)
        if listed is not None:
            self.names[listed[1]] = tuple(_LIST_ITEM.findall(listed[2]))
        elif _NAME_LIST_START.match(line):
            declared = short_repr(line.strip(), _SHOWN_LEN)
            raise ArchiveError(
                f"class {short_repr(self.name, _SHOWN_LEN)} declares {declared}, "
                "expected a list of quoted names",
                entry=entry,
                path=path,
            )
        elif typed := _TENSOR_LINE.fullmatch(line):
            self.tensor_typed.add(typed[1] if typed[1] is not None else typed[2])

    def finish(self) -> ClassHeader:
        if not self.names and not self.tensor_typed:  # one record for all such classes
            return _MODULE_WITHOUT_DECLARATIONS if self.is_module else _CLASS_WITHOUT_DECLARATIONS
        return ClassHeader(
            self.is_module,
            self.names.get("__parameters__", ()),
            self.names.get("__buffers__", ()),
            frozenset(self.tensor_typed),
        )


def module_state(
    root: object, read_entry: EntryReader, prefix: str, limits: Limits, path: str | None
) -> dict[str, object]:
    """The parameters and buffers of the module `root` (data.pkl's decoded value) and of its
    submodules, as nested dicts in ``state_dict()`` order; reads the code/ files it needs.

    Raises:
        ArchiveError: `root` is no TorchScript module, or a class it uses has no source.
        LimitExceeded: modules nest deeper than ``limits.max_depth``; `read_entry` raises it
            for code past ``limits.max_code_size``.
        UnsupportedObjectError: a module restored by its own ``__setstate__`` holds submodules.
    """
    classes = _ClassTable(read_entry, prefix, path)
    header = classes.module_header(root)
    if header is None or not isinstance(root, InertObject):
        raise ArchiveError(
            f"holds {short_repr(root, _SHOWN_LEN)}, expected a TorchScript module",
            entry=prefix + DATA_PKL,
            path=path,
        )
    return _StateBuilder(classes, limits, path).module(root, header, "", 0)


class _ClassTable:
    """Class headers by qualified name, each code/ file read and parsed once, when needed."""

    def __init__(self, read_entry: EntryReader, prefix: str, path: str | None) -> None:
        self._read_entry, self._prefix, self._path = read_entry, prefix, path
        self._files: dict[str, dict[str, ClassHeader]] = {}

    def module_header(self, value: object) -> ClassHeader | None:
        """The header of `value`'s class when `value` is a TorchScript module, else ``None``."""
        if not isinstance(value, InertObject) or not isinstance(value.callee, GlobalRef):
            return None
        ref = value.callee
        if not _under(ref.module, SCRIPT_ROOT) or _under(ref.module, TORCHBIND_ROOT):
            return None
        header = self._headers(ref.module).get(ref.name)
        if header is None:
            raise ArchiveError(
                f"declares no class {short_repr(ref.name, _SHOWN_LEN)}, which data.pkl uses",
                entry=self._prefix + _source_entry(ref.module),
                path=self._path,
            )
        return header if header.is_module else None

    def _headers(self, module: str) -> dict[str, ClassHeader]:
        headers = self._files.get(module)
        if headers is None:
            entry = _source_entry(module)
            chunks = self._read_entry(entry)
            if chunks is None:
                raise ArchiveError(
                    f"is missing, and data.pkl uses classes of {short_repr(module, _SHOWN_LEN)}",
                    entry=self._prefix + entry,
                    path=self._path,
                )
            headers = parse_class_headers(chunks, self._prefix + entry, self._path)
            self._files[module] = headers
        return headers


def _under(module: str, root: str) -> bool:
    return module == root or module.startswith(root + ".")


def _source_entry(module: str) -> str:
    """``__torch__.a.b`` -> ``code/__torch__/a/b.py``, where torch's importer looks for it."""
    return CODE_FOLDER + module.replace(".", "/") + ".py"


def _is_tensor(value: object) -> bool:
    return isinstance(value, LazyTensor | UnreadableTensor)


class _StateBuilder:
    """Turns the module graph into nested state dicts. A module object reached twice (a memo
    reference) is built once and shared, so the work is bounded by the pickle's size; `_walk`
    charges the paths through shared parts against ``max_nodes`` when naming. A module that
    reaches itself is not followed again."""

    def __init__(self, classes: _ClassTable, limits: Limits, path: str | None) -> None:
        self._classes, self._limits, self._path = classes, limits, path
        self._built: dict[int, dict[str, object]] = {}
        self._on_path: set[int] = set()

    def module(
        self, value: InertObject, header: ClassHeader, name: str, depth: int
    ) -> dict[str, object]:
        built = self._built.get(id(value))
        if built is not None:
            return built
        if depth >= self._limits.max_depth:
            raise LimitExceeded(
                "nesting depth of TorchScript modules",
                depth + 1,
                self._limits.max_depth,
                path=self._path,
            )
        self._on_path.add(id(value))
        try:
            if isinstance(value.state, dict):
                built = self._from_attributes(value.attributes, header, name, depth)
            else:
                built = self._restored_by_code(value, header, name)
        finally:
            self._on_path.discard(id(value))
        self._built[id(value)] = built
        return built

    def _from_attributes(
        self, attributes: dict[str, object], header: ClassHeader, name: str, depth: int
    ) -> dict[str, object]:
        parameters, buffers = set(header.parameters), set(header.buffers)
        state: dict[str, object] = {}
        for key, value in attributes.items():  # slot order, as torch pickles them
            if key in parameters and _is_tensor(value):
                if isinstance(value, LazyTensor):
                    value = value.replace(is_parameter=True)
                state[key] = value
        for key, value in attributes.items():
            if key in buffers and key in header.tensor_typed and _is_tensor(value):
                state[key] = value
        for key, value in attributes.items():
            child = self._classes.module_header(value)
            if child is None or id(value) in self._on_path:
                continue
            assert isinstance(value, InertObject)  # module_header returned a header
            entries = self.module(value, child, f"{name}.{key}" if name else key, depth + 1)
            if entries:
                state[key] = entries
        return state

    def _restored_by_code(
        self, value: InertObject, header: ClassHeader, name: str
    ) -> dict[str, object]:
        state = value.state
        items = state if isinstance(state, list | tuple) else (state,)
        if any(self._classes.module_header(item) is not None for item in items):
            raise UnsupportedObjectError(
                clip(value.class_name, _SHOWN_LEN),
                "a TorchScript module whose own __setstate__ code places its submodules",
                path=self._path,
                tensor=name or None,
            )
        unreadable = UnreadableTensor(
            clip(value.class_name, _SHOWN_LEN),
            "a TorchScript module that only its own __setstate__ code restores",
        )
        declared = header.parameters + header.buffers
        return {key: unreadable for key in declared if key in header.tensor_typed}
