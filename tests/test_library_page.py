"""The dashboard's Library page (AppTest): coverage grid with links to runs, misses, the build button."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.library.manifest import Entry, Library, entry_id, sha256_bytes
from dashboard import launch
from dashboard import library as L

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def make_entry(root: Path, part: str, op: str, fmt: str, n: int, k: int, m: int, speedup: float) -> Entry:
    source = f"/* {part} {m} */\n".encode()
    eid = entry_id(op, fmt, n, k, m, "c", sha256_bytes(source))
    (root / "entries" / eid).mkdir(parents=True)
    (root / "entries" / eid / "kernel.c").write_bytes(source)
    return Entry(id=eid, op=op, fmt=fmt, shape={"N": n, "K": k, "M": m}, problem={}, backend="c",
                 device={"name": "Test CPU", "arch": "x86_64", "kind": "cpu"}, toolchain={},
                 source=f"entries/{eid}/kernel.c", source_hash=sha256_bytes(source), artefact=None,
                 artefact_hash=None,
                 figures={"time_us": 2.0, "speedup": speedup, "primary": "numpy", "cache": "cold",
                          "baselines": {"numpy": {"time_us": 2.0 * speedup, "speedup": speedup}}},
                 provenance={"run_id": f"lib-t-c-{part}-m{m}", "part": part})


@pytest.fixture
def library(tmp_path, monkeypatch) -> Path:
    runs, libs = tmp_path / "runs", tmp_path / "libraries"
    runs.mkdir()
    root = libs / "tiny"
    root.mkdir(parents=True)
    entries = [make_entry(root, "down", "w4a16", "w4g128-fp32", 64, 256, m, s) for m, s in ((1, 1.5), (4, 1.25))]
    entries.append(make_entry(root, "rmsnorm", "rmsnorm", "fp32-res", 64, 64, 1, 3.0))
    Library(entries=entries, model="tiny").save(root)
    misses = [{"op": "w4a16", "fmt": "w4g128-fp32", "N": 64, "K": 256, "M": 16, "device": "Test CPU", "time": 1e9},
              {"op": "w4a16", "fmt": "w4g128-fp32", "N": 64, "K": 256, "M": 16, "device": "Test CPU",
               "time": "2033-05-18T03:33:20Z"},
              {"op": "w4a16", "fmt": "w4g128-fp32", "N": 64, "K": 256, "M": 1, "device": "Test CPU", "time": 1e9}]
    (root / "misses.jsonl").write_text("".join(json.dumps(m) + "\n" for m in misses) + "not json\n")
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(runs))
    monkeypatch.setenv("ABEBOT_LIBRARIES_DIR", str(libs))
    monkeypatch.setattr(launch, "_launched", {})
    monkeypatch.setattr(L, "REPO_ROOT", tmp_path)  # the repository's own libraries/ stay out of the test
    return root


def app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/library.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_grid_has_one_row_per_shape_and_a_column_per_m_bucket(library):
    grid = L.coverage(Library.load(library))
    down = grid[grid["part"] == "down"].iloc[0]
    assert list(grid.columns[-2:]) == ["M=1", "M=4"]
    assert down["M=1"] == "monitor?run=lib-t-c-down-m1#1.50x numpy" and down["M=4"].endswith("#1.25x numpy")
    assert pd.isna(grid[grid["part"] == "rmsnorm"].iloc[0]["M=4"])  # not built: an empty cell


def test_misses_the_library_already_covers_are_left_out(library):
    missed = L.missing(Library.load(library), library)
    assert missed[["M", "misses"]].values.tolist() == [[16, 2]]
    assert missed["last"][0] == pd.Timestamp("2033-05-18T03:33:20Z")  # the later of epoch and ISO times


def test_the_page_shows_the_grid_and_the_misses(library):
    at = app()
    grid = next(d.value for d in at.dataframe if "part" in d.value.columns)
    assert set(grid["part"]) == {"down", "rmsnorm"}
    misses = next(d.value for d in at.dataframe if "misses" in d.value.columns)
    assert misses["M"].tolist() == [16]
    assert any(b.label == "Build the missing entries" for b in at.button)


class FakeProcess:
    pid = 4242

    def poll(self):
        return None


def test_build_starts_the_from_misses_build_and_counts_as_busy(library, monkeypatch):
    started = []
    monkeypatch.setattr(launch, "_spawn", lambda argv, log: started.append(argv) or FakeProcess())
    at = app()
    next(b for b in at.button if b.label == "Build the missing entries").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (argv,) = started
    assert argv[1:6] == ["-m", "core", "library", "build", "--from-misses"]
    assert argv[6] == str(library / "misses.jsonl") and argv[argv.index("--out") + 1] == str(library)
    assert launch.busy_reason(Path(argv[argv.index("--runs-dir") + 1]), "c", 0) is not None
    at = app()  # a later visit sees the build running and offers no second one
    assert "is running" in " ".join(i.value for i in at.info)
    assert not any(b.label == "Build the missing entries" for b in at.button)


def test_a_busy_device_refuses_the_build(library, monkeypatch):
    started = []
    monkeypatch.setattr(launch, "_spawn", lambda argv, log: started.append(argv) or FakeProcess())
    monkeypatch.setattr(launch, "busy_reason", lambda runs, backend, device: "Device c:0 is busy: run x.")
    at = app()
    next(b for b in at.button if b.label == "Build the missing entries").click().run()
    assert started == [] and "is busy" in at.error[0].value


def test_no_library_says_how_to_build_one(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ABEBOT_LIBRARIES_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(L, "REPO_ROOT", tmp_path)
    at = app()
    text = " ".join(i.value for i in at.info)
    assert "No kernel library yet" in text and "python -m core library build" in text
