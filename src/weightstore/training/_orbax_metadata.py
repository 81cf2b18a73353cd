"""An Orbax checkpoint's layout, read from its JSON files alone (no tensorstore, no JAX).

What ``ocp.StandardCheckpointer().save(path, tree)`` and ``ocp.PyTreeCheckpointer`` write (one
"item"; a ``CheckpointManager`` step directory holds one folder per item, ``<step>/default/``)::

    item/
      _CHECKPOINT_METADATA   JSON: the handler, timestamps, the user's ``custom_metadata``
                             (in the step directory instead, for a CheckpointManager item)
      _METADATA              JSON: ``tree_metadata``, one entry per leaf by its key path:
                             ``key_metadata`` (each key and its type: 1 sequence, 2 dict) and
                             ``value_metadata`` (``value_type``, ``skip_deserialize``, and for
                             a jax.Array ``write_shape``, the shape each process wrote);
                             ``use_ocdbt``, ``use_zarr3``, ``custom_metadata``
      _strings.json          JSON object: each ``string`` leaf's value by parameter name
      _sharding, array_metadatas/   how each jax.Array was placed (not needed to read it)
      manifest.ocdbt, d/, ocdbt.process_0/   with OCDBT (the default): one key-value database
                             holding every array as a zarr array under its parameter name
      a.w/.zarray, a.w/0.0   without OCDBT: one zarr folder per array, named as the parameter

A leaf's parameter name is its keys joined with ``.`` (list and tuple indices as numbers);
weightstore names it the same, as its JAX bridge names a pytree's leaves. An NNX ``State``
flattens each Variable to its ``value`` attribute, so every leaf of a saved NNX state ends in
``.value``; that last segment is dropped then (`_nnx_state`), giving the names the bridge gives
the model's Variables (``fc.kernel``). ``jax.Array`` and ``np.ndarray`` leaves are tensors;
``scalar`` leaves (a Python int or float, stored as a 0-d array), ``string`` leaves and empty
containers (``None``, ``{}``, ``[]``, ``()``, stored as metadata alone) are values.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import Record, ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.errors import FileMissingError, LimitExceeded, SetError, UnsupportedFormatError
from weightstore.io._source import open_readable
from weightstore.sets._index import _kind, decode_json

__all__ = [
    "CHECKPOINT_METADATA_NAME",
    "MAX_ORBAX_METADATA_SIZE",
    "METADATA_NAME",
    "OCDBT_MANIFEST_NAME",
    "STRINGS_NAME",
    "OrbaxIndex",
    "OrbaxLeaf",
    "is_orbax_checkpoint",
    "item_directory",
    "read_json_file",
    "read_orbax_index",
]

METADATA_NAME: Final = "_METADATA"
"""The item's tree of leaves: what makes a folder an Orbax item."""
CHECKPOINT_METADATA_NAME: Final = "_CHECKPOINT_METADATA"
"""The save's own record (handler, times, custom metadata), in an item or its step folder."""
STRINGS_NAME: Final = "_strings.json"
"""The values of the tree's string leaves."""
OCDBT_MANIFEST_NAME: Final = "manifest.ocdbt"
"""The root of the OCDBT database holding every array, when the save used OCDBT."""
MAX_ORBAX_METADATA_SIZE: Final = 1 << 28
"""Bytes of one JSON file of a checkpoint read at most (256 MiB; a 100,000-leaf tree's
``_METADATA`` is about 30 MB)."""
MAX_ORBAX_METADATA_DEPTH: Final = 256
"""JSON nesting accepted: the tree itself nests 5 deep, the user's ``custom_metadata`` more."""

# Beside `_METADATA`, any of these says Orbax wrote the folder (a Parquet dataset's
# `_metadata` matches `_METADATA` on a case-insensitive filesystem, none of these).
_ITEM_MARKERS: Final = frozenset({
    OCDBT_MANIFEST_NAME, CHECKPOINT_METADATA_NAME, STRINGS_NAME, "_sharding",
    "array_metadatas", "commit_success.txt",
})  # fmt: skip
ARRAY_TYPES: Final = frozenset({"jax.Array", "np.ndarray"})
SCALAR_TYPE: Final = "scalar"
STRING_TYPE: Final = "string"
_EMPTY_VALUES: Final[Mapping[str, object]] = {
    "None": None, "NamedTuple": None, "Dict": {}, "List": [], "Tuple": (),
}  # fmt: skip  # what Orbax itself restores for each (an empty NamedTuple as None)
_PLACEHOLDER_TYPE: Final = "placeholder"  # a leaf left out of a partial save: nothing stored
_SEQUENCE_KEY, _DICT_KEY = 1, 2
_NNX_VALUE: Final = "value"
_SHOWN: Final = 80


class OrbaxLeaf(ValueRecord):
    """One saved leaf: weightstore's name for it, Orbax's parameter name (the key of its zarr
    array), its keys, its ``value_type`` and, for a jax.Array, the shape each process wrote."""

    name: str
    param: str
    keys: tuple[str, ...]
    value_type: str
    write_shape: tuple[int, ...] | None


class OrbaxIndex(Record):
    """A decoded, checked Orbax item.

    Attributes:
        path: the item directory.
        use_ocdbt, use_zarr3: how the arrays are stored.
        arrays: tensor name -> leaf, in ``_METADATA``'s order (the tree's flattening order).
        scalars, strings: value name -> leaf, for the values stored as 0-d arrays or in
            ``_strings.json``.
        empties: value name -> the empty value (None, {}, [], ()) stored as metadata alone.
        custom_metadata: the user's ``custom_metadata`` of ``_CHECKPOINT_METADATA`` and
            ``_METADATA``, each value a string (JSON text when it was not one).
        nnx_state: True when the tree is a saved NNX State, its leaves' ``.value`` dropped.
    """

    path: str
    use_ocdbt: bool
    use_zarr3: bool
    arrays: dict[str, OrbaxLeaf]
    scalars: dict[str, OrbaxLeaf]
    strings: dict[str, OrbaxLeaf]
    empties: dict[str, object]
    custom_metadata: dict[str, str]
    nnx_state: bool


# -- finding the item -----------------------------------------------------------------------


def is_orbax_checkpoint(path: str) -> bool:
    """True for an Orbax item directory (``_METADATA`` beside a file or folder only Orbax
    writes) or a step directory (``_CHECKPOINT_METADATA`` with an item folder); asks names
    only, reads no file. A ``CheckpointManager``'s root, holding step folders, is none: a
    step is chosen by its directory."""
    names = _names(path)
    if METADATA_NAME in names:
        return not names.isdisjoint(_ITEM_MARKERS)
    return CHECKPOINT_METADATA_NAME in names and bool(_item_folders(path, names))


def item_directory(path: str) -> str:
    """The item directory `path` names: itself, the folder of a ``_METADATA`` file, or the
    one item folder of a step directory.

    Raises:
        FileMissingError: nothing is at `path`, or no ``_METADATA`` is where it should be.
        SetError: a step directory with several items (each is opened by its own folder), or
            a CheckpointManager root (a step is opened by its directory).
        UnsupportedFormatError: `path` is a file other than ``_METADATA``.
    """
    if os.path.isfile(path):
        if os.path.basename(path) != METADATA_NAME:
            raise UnsupportedFormatError(
                f"is a file, not an Orbax checkpoint directory or its {METADATA_NAME}", path=path
            )
        return os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(path):
        raise FileMissingError(path)
    names = _names(path)
    if METADATA_NAME in names:
        return path
    if CHECKPOINT_METADATA_NAME not in names:
        steps = sorted(
            n for n in names if os.path.isfile(os.path.join(path, n, CHECKPOINT_METADATA_NAME))
        )
        if steps:
            shown = bounded_repr(steps, limit=_SHOWN)
            raise SetError(
                f"is a CheckpointManager's root, holding steps {shown}; open one step's directory",
                path=path,
            )
        return path
    items = _item_folders(path, names)
    if len(items) > 1:
        shown = bounded_repr(items, limit=_SHOWN)
        raise SetError(
            f"this step directory holds {len(items)} Orbax items ({shown}); open one by its folder",
            path=path,
        )
    return os.path.join(path, items[0]) if items else path


def _names(path: str) -> set[str]:
    try:
        return set(os.listdir(path))
    except (OSError, ValueError, TypeError):  # not a directory, a NUL in the name
        return set()


def _item_folders(path: str, names: set[str]) -> list[str]:
    return sorted(n for n in names if os.path.isfile(os.path.join(path, n, METADATA_NAME)))


# -- reading the metadata -------------------------------------------------------------------


def read_json_file(path: str, max_size: int = MAX_ORBAX_METADATA_SIZE) -> object:
    """The JSON value of the file at `path`, read as input from strangers (`decode_json`).

    Raises:
        FileMissingError: no file there. LimitExceeded: over `max_size` bytes.
        SetError: not UTF-8, not JSON, keys given twice, nested too deep.
    """
    with open_readable(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > max_size:
            raise LimitExceeded("Orbax metadata bytes", size, max_size, path=path)
        data = file.read(max_size + 1)
    if len(data) > max_size:
        raise LimitExceeded("Orbax metadata bytes", len(data), max_size, path=path)
    return decode_json(data, path, MAX_ORBAX_METADATA_DEPTH)


def read_orbax_index(path: str, *, max_size: int = MAX_ORBAX_METADATA_SIZE) -> OrbaxIndex:
    """The index of the Orbax item at `path` (`item_directory` says which paths name one),
    from ``_METADATA`` and ``_CHECKPOINT_METADATA``; no array is opened. Without OCDBT each
    array's folder must be there; with it, the database's manifest.

    Raises:
        FileMissingError: the path, ``_METADATA``, or the OCDBT manifest is missing.
        SetError: a JSON file that is not what Orbax writes (named, with the leaf at fault);
            two leaves with one name; an array folder missing or outside the directory.
        LimitExceeded: a JSON file over `max_size` bytes.
    """
    directory = item_directory(path)
    metadata_path = os.path.join(directory, METADATA_NAME)
    top = read_json_file(metadata_path, max_size)
    if not isinstance(top, dict):
        raise SetError(f"is a JSON {_kind(top)}, not an object", path=metadata_path)
    tree = top.get("tree_metadata")
    if not isinstance(tree, dict):
        raise SetError('"tree_metadata" is not a JSON object', path=metadata_path)
    leaves = [_leaf(entry, metadata_path) for entry in tree.values()]
    nnx_state = _nnx_state(leaves)
    if nnx_state:
        leaves = [_without_value(leaf) for leaf in leaves]
    use_ocdbt = _flag(top, "use_ocdbt", metadata_path)
    if use_ocdbt is None:  # written before Orbax recorded it: the manifest tells
        use_ocdbt = os.path.isfile(os.path.join(directory, OCDBT_MANIFEST_NAME))
    arrays, scalars, strings, empties = _sorted_leaves(leaves, metadata_path)
    index = OrbaxIndex(
        path=directory,
        use_ocdbt=use_ocdbt,
        use_zarr3=bool(_flag(top, "use_zarr3", metadata_path)),
        arrays=arrays,
        scalars=scalars,
        strings=strings,
        empties=empties,
        custom_metadata=_custom_metadata(directory, top, metadata_path, max_size),
        nnx_state=nnx_state,
    )
    _check_storage(index)
    return index


def _leaf(entry: object, path: str) -> OrbaxLeaf:
    """One ``tree_metadata`` entry as a leaf, its keys and value metadata checked."""
    if not isinstance(entry, dict):
        raise SetError(f"a tree entry is a JSON {_kind(entry)}, not an object", path=path)
    keys_json, value = entry.get("key_metadata"), entry.get("value_metadata")
    if not isinstance(keys_json, list) or not keys_json:
        raise SetError('a tree entry\'s "key_metadata" is no list of keys', path=path)
    keys = tuple(_key(key, path) for key in keys_json)
    name = ".".join(keys)
    if not isinstance(value, dict) or not isinstance(value.get("value_type"), str):
        raise SetError('its "value_metadata" names no value type', path=path, tensor=name)
    write_shape = value.get("write_shape")
    if write_shape is not None and not (
        isinstance(write_shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in write_shape)
    ):
        raise SetError('its "write_shape" is no list of sizes', path=path, tensor=name)
    shape = None if write_shape is None else tuple(write_shape)
    return OrbaxLeaf(name, name, keys, value["value_type"], shape)


def _key(key: object, path: str) -> str:
    if not isinstance(key, dict) or key.get("key_type") not in (_SEQUENCE_KEY, _DICT_KEY):
        raise SetError(f"a key is {bounded_repr(key, limit=_SHOWN)}, no Orbax key", path=path)
    name = key.get("key")
    if isinstance(name, bool) or not isinstance(name, str | int):
        raise SetError(f"a key is {bounded_repr(key, limit=_SHOWN)}, no Orbax key", path=path)
    return str(name)


def _nnx_state(leaves: list[OrbaxLeaf]) -> bool:
    """True when every leaf holding data ends in ``value``, below another key: how an NNX
    State's Variables flatten (`Variable.value`). A plain tree whose every leaf is named
    ``value`` reads the same; its names then lose that segment too."""
    stored = [leaf for leaf in leaves if leaf.value_type not in _EMPTY_VALUES]
    return bool(stored) and all(
        len(leaf.keys) > 1 and leaf.keys[-1] == _NNX_VALUE for leaf in stored
    )


def _without_value(leaf: OrbaxLeaf) -> OrbaxLeaf:
    if len(leaf.keys) > 1 and leaf.keys[-1] == _NNX_VALUE:
        return leaf.replace(name=".".join(leaf.keys[:-1]))
    return leaf


def _flag(top: Mapping[str, object], key: str, path: str) -> bool | None:
    value = top.get(key)
    if value is not None and not isinstance(value, bool):
        raise SetError(f'"{key}" is a JSON {_kind(value)}, not a boolean', path=path)
    return value


def _sorted_leaves(
    leaves: list[OrbaxLeaf], path: str
) -> tuple[dict[str, OrbaxLeaf], dict[str, OrbaxLeaf], dict[str, OrbaxLeaf], dict[str, object]]:
    """The arrays, scalars, strings and empty values, each by name in the tree's order;
    refuses a name given twice and a value type none of Orbax's own handlers writes (a
    custom handler's data is its own to read)."""
    tables: dict[str, dict[str, OrbaxLeaf]] = {kind: {} for kind in (SCALAR_TYPE, STRING_TYPE)}
    arrays: dict[str, OrbaxLeaf] = {}
    empties: dict[str, object] = {}
    seen: set[str] = set()
    for leaf in leaves:
        if leaf.name in seen:
            raise SetError("two leaves of the tree have this name", path=path, tensor=leaf.name)
        seen.add(leaf.name)
        kind = leaf.value_type
        if kind in ARRAY_TYPES:
            arrays[leaf.name] = leaf
        elif kind in tables:
            tables[kind][leaf.name] = leaf
        elif kind in _EMPTY_VALUES:
            empties[leaf.name] = _EMPTY_VALUES[kind]
        elif kind != _PLACEHOLDER_TYPE:
            raise SetError(
                f"its value type {bounded_repr(kind, limit=_SHOWN)} is none of Orbax's own "
                "(jax.Array, np.ndarray, scalar, string, empty containers)",
                path=path,
                tensor=leaf.name,
            )
    return arrays, tables[SCALAR_TYPE], tables[STRING_TYPE], empties


def _check_storage(index: OrbaxIndex) -> None:
    """The OCDBT manifest, or each zarr array's folder, is where the index says."""
    if index.use_ocdbt:
        manifest = os.path.join(index.path, OCDBT_MANIFEST_NAME)
        if not os.path.isfile(manifest):
            raise FileMissingError(manifest)
        return
    for leaf in (*index.arrays.values(), *index.scalars.values()):
        if not _is_folder_name(leaf.param):
            raise SetError(
                "its parameter name is no folder name inside the checkpoint",
                path=index.path,
                tensor=leaf.name,
            )
        folder = os.path.join(index.path, leaf.param)
        if not os.path.isdir(folder):
            raise SetError(
                f"its array folder {bounded_repr(leaf.param, limit=_SHOWN)} is missing",
                path=index.path,
                tensor=leaf.name,
                shard=leaf.param,
            )


def _is_folder_name(name: str) -> bool:
    """True for a name that stays inside its directory when joined to it."""
    return name not in {"", ".", ".."} and not any(c in name for c in "/\\\0")


def _custom_metadata(
    directory: str, top: Mapping[str, object], metadata_path: str, max_size: int
) -> dict[str, str]:
    """The user's ``custom_metadata``: ``_CHECKPOINT_METADATA``'s (the item's own, else its
    step directory's) and then ``_METADATA``'s, each value as a string."""
    found: dict[str, str] = {}
    for candidate in (directory, os.path.dirname(os.path.abspath(directory))):
        checkpoint = os.path.join(candidate, CHECKPOINT_METADATA_NAME)
        if os.path.isfile(checkpoint):
            decoded = read_json_file(checkpoint, max_size)
            if not isinstance(decoded, dict):
                raise SetError(f"is a JSON {_kind(decoded)}, not an object", path=checkpoint)
            found.update(_as_strings(decoded.get("custom_metadata"), checkpoint))
            break
    found.update(_as_strings(top.get("custom_metadata"), metadata_path))
    return found


def _as_strings(custom: object, path: str) -> dict[str, str]:
    if custom is None:
        return {}
    if not isinstance(custom, dict):
        raise SetError(f'"custom_metadata" is a JSON {_kind(custom)}, not an object', path=path)
    return {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in custom.items()
    }
