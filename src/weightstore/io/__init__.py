"""The byte layer: where bytes come from and go to.

Local files by mmap and pread (`_source`), memory, URLs by planned range reads
(`_remote_source`, over `_fs`, the only fsspec import), atomic local saves (`_atomic`) and
whole-or-nothing uploads (`_remote_write`); `open_source` picks the source for a path and
`is_url` tells a URL from a path, once for the whole package. It knows no format and no model.
"""

from weightstore.io._url import is_url

__all__ = ["is_url"]
