"""Files the library reads and writes: atomic outputs, data tables in and out.

The lowest layer of the package (it imports nothing else from mbkkm), so the
dataset loaders, the experiments, the demo and the command line share it.
"""

from ._atomic import atomic_write, save_figure
from ._read import (
    ColumnSelectionError,
    OptionError,
    Table,
    names_list,
    open_table,
    select_columns,
)
from ._write import open_writer, output_kind

__all__ = [
    "ColumnSelectionError",
    "OptionError",
    "Table",
    "atomic_write",
    "names_list",
    "open_table",
    "open_writer",
    "output_kind",
    "save_figure",
    "select_columns",
]
