"""An input read whole, in order, as blocks of valid UTF-8: the readers counting uses, over the
whole input rather than one work unit; what ``bpe-store encode`` reads, so that it reads every
input kind exactly as training does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from .inputs import FileInput, Unit
from .parquet import parquet_column_type, parquet_file
from .pretokenize import PretokenSpec
from .streams import Stream
from .units import unit_blocks


def input_blocks(item: FileInput | Stream, spec: PretokenSpec, block_size: int) -> Iterator[bytes]:
    """The whole text of one input, in order, as blocks of valid UTF-8, documents joined by
    ``DOC_SEP`` when it holds several (``has_documents``): the readers counting uses
    (``unit_blocks``, ``Stream.blocks``), over the whole input rather than one work unit. What
    ``bpe-store encode`` reads, so that it reads every input kind exactly as training does."""
    if isinstance(item, Stream):
        for block, _ in item.blocks(item.source(), spec, block_size):
            yield block
        return
    path = str(item.path)
    if item.format == "parquet":
        parquet_column_type(path, item.text_field)  # the column's type, checked as training does
        groups = parquet_file(path).metadata.num_row_groups
        units = [Unit(path, "parquet", "none", item.text_field, "row_group", 0, 0, g) for g in range(groups)]
    else:
        units = [Unit(path, item.format, item.compression, item.text_field, "file", 0, os.path.getsize(path))]
    for unit in units:
        yield from unit_blocks(unit, spec, block_size)


def has_documents(item: FileInput | Stream) -> bool:
    """Whether ``input_blocks(item)`` joins several documents by ``DOC_SEP`` (else the whole input is
    one document: a text file, text on standard input)."""
    return item.format != "text"
