"""Load the tuning tables the service serves: shipped package data or a directory."""

from __future__ import annotations

from pathlib import Path

from tiling_model import known_socs
from tiling_model.tables import TableError, TuningTable, load_table

SHIPPED_TABLES = Path(__file__).resolve().parent / "tables"


def load_tables(directory: Path | None = None) -> dict[str, TuningTable]:
    """Every ``<SoC>.json`` in ``directory``; any bad file stops start-up with its name and problem."""
    directory = directory or SHIPPED_TABLES
    if not directory.is_dir():
        raise TableError(f"{directory}: tables directory does not exist")
    tables: dict[str, TuningTable] = {}
    for path in sorted(directory.glob("*.json")):
        table = load_table(path)
        if path.stem not in known_socs():
            raise TableError(f"{path}: file name is not a known SoC ({', '.join(known_socs())})")
        if table.soc != path.stem:
            raise TableError(f"{path}: holds SoC {table.soc!r}, but the file is named for {path.stem!r}")
        tables[table.soc] = table
    return tables
