"""What `weightstore inspect` shows about a GGUF file: its header facts, typed metadata, and
each tensor's ggml type.

GGUF metadata is typed and can be large: a vocabulary is an array of 256k strings, its merges
another. Scalars are listed as their values; an array as its type, its count and its first
`ARRAY_ITEMS_SHOWN` elements, decoded alone (`GgufReader.metadata_head`), so listing a file
costs its header's bytes whatever its vocabulary holds. Each tensor's row gives the ggml type
it is stored in and its bytes in the file (a quantized tensor's blocks, not its dequantized
size), so the total is the bytes on disk.
"""

from __future__ import annotations

import json
from typing import Any, Final

from weightstore.cli._report import FileReport, SetSummary, TensorRow, _file_size, _remote
from weightstore.cli._text import json_number
from weightstore.gguf._header import ArrayHead
from weightstore.gguf._names import file_name

__all__ = ["ARRAY_ITEMS_SHOWN", "summarize_gguf"]

ARRAY_ITEMS_SHOWN: Final = 5
"""Elements of a metadata array listed (in text and JSON); the count gives the rest."""


def summarize_gguf(path: str, options: dict[str, Any]) -> FileReport:
    """A GGUF file's report: version, byte order and alignment, the metadata pairs (arrays cut
    to their first elements), the tensors in the order of their infos with their ggml types.
    A part of a split model (or its directory's first part) reports the whole model: every
    part's tensors (each row's storage its part, its offset in that part), the model's
    metadata (part 1's), and the parts as the set's shards."""
    from weightstore.gguf._split import GgufSplitReader, open_gguf

    with open_gguf(path, **_remote(path, options)) as model:
        split = isinstance(model, GgufSplitReader)
        parts = model.part_readers if isinstance(model, GgufSplitReader) else (model,)  # mypy
        rows: list[TensorRow] = []
        shards: list[tuple[str, int, int]] = []
        for part in parts:
            name = file_name(str(part.path))
            rows += [
                TensorRow(
                    info.name,
                    info.dtype,
                    info.shape,
                    info.nbytes,
                    part.data_start + info.data_offsets[0],
                    name if split else None,
                    ggml=info.ggml.name,
                )
                for info in (part.descriptor(tensor) for tensor in part.names())
            ]
            shards.append((name, _file_size(str(part.path), options), len(part)))
        first = parts[0]
        metadata: dict[str, Any] = {}
        texts: dict[str, str] = {}
        for key in model.metadata_keys():
            if first.metadata_length(key) is None:
                metadata[key] = _json_scalar(first.metadata_value(key).value)
                continue
            head = first.metadata_head(key, ARRAY_ITEMS_SHOWN)
            metadata[key], texts[key] = _head_json(head), _head_text(head)
        byte_order = "little" if first.byte_order == "<" else "big"
        return FileReport(
            path=path,
            format="gguf",
            file_size=sum(size for _, size, _ in shards),
            version=str(first.version),
            metadata=metadata,
            metadata_text=texts,
            layout={
                "byte_order": byte_order,
                "alignment": first.alignment,
                "data_start": first.data_start,
            },
            tensors=rows,
            set=SetSummary(None, shards, [], {}, {}, []) if split else None,
        )


def _json_scalar(value: object) -> Any:
    """A decoded GGUF value as JSON holds it (a non-finite float as ``"NaN"``...)."""
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, ArrayHead):
        return _head_json(value)
    return value


def _head_json(head: ArrayHead) -> dict[str, Any]:
    return {
        "type": head.type_name,
        "count": head.count,
        "first": [_json_scalar(item) for item in head.items],
    }


def _item_text(item: object) -> str:
    if isinstance(item, ArrayHead):
        return f"[{_head_text(item)}]"
    return json.dumps(_json_scalar(item), ensure_ascii=False)


def _head_text(head: ArrayHead) -> str:
    """``array[string], 1,000 items: "<s>", "</s>", ...``."""
    noun = "item" if head.count == 1 else "items"
    text = f"{head.type_name}, {head.count:,} {noun}"
    if not head.items:
        return text
    more = ", ..." if head.count > len(head.items) else ""
    return f"{text}: {', '.join(_item_text(item) for item in head.items)}{more}"
