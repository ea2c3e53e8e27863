"""Run storage: one folder per run, a DuckDB database written only by the worker, Parquet mirrors
in ``live/`` read by the dashboard. See docs/CONTRACTS.md, section "Store"."""
from __future__ import annotations

from store.control import read_control, write_control
from store.reader import RunReader
from store.runs import list_runs, new_run_id, run_dir
from store.schema import SCHEMA_VERSION, StoreError
from store.writer import RunWriter

__all__ = ["SCHEMA_VERSION", "RunReader", "RunWriter", "StoreError", "list_runs", "new_run_id", "read_control",
           "run_dir", "write_control"]
