"""One measurement record: the store's individuals columns, the worker's rows and the exported
report all follow the fields :class:`core.evaluation.record.Evaluation` declares."""
from __future__ import annotations

from dataclasses import fields

from core.evaluation.record import SANDBOX_MEASURES, STORED_COLUMNS, Evaluation, describe
from core.run.rows import KEPT, compact_measure, measure_columns
from store.schema import individuals_columns


def test_every_field_says_its_unit_and_meaning():
    for f in fields(Evaluation):
        unit, about = describe(f.name)
        assert about and isinstance(unit, str), f.name
    assert describe("time_us")[0] == "us" and describe("memory_bytes")[0] == "B"


def test_every_stored_field_is_an_individuals_column_of_its_type():
    columns = dict(individuals_columns(("time", "memory", "stability")))
    wrong = {name: (kind, columns.get(name)) for name, kind in STORED_COLUMNS.items() if columns.get(name) != kind}
    assert not wrong, f"record fields whose store column is missing or of another type: {wrong}"


def test_a_measurement_becomes_exactly_its_stored_columns():
    ev = Evaluation("g", "ok", time_us=3.5, shape_errors=[{"shape": "m=3"}], phases={"timing": 0.1})
    row = measure_columns(ev.to_dict())
    assert set(row) == set(STORED_COLUMNS)
    assert row["time_us"] == 3.5 and row["shape_errors"].startswith("[") and row["device"] is None


def test_what_memory_keeps_covers_every_stored_field_and_what_the_sandbox_measures():
    kept = compact_measure({**Evaluation("g", "ok").to_dict(), "time_samples_us": [1.0]})
    assert set(STORED_COLUMNS) <= set(kept) and set(SANDBOX_MEASURES) <= set(KEPT)
