"""The dashboard's Replay page (AppTest): sweeps under <runs>/sweeps/, their saved replays as a chart and a table."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.tools.replay import replay
from tests.test_replay import make_table

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _page(runs: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(runs))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/replay.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_says_how_to_record_a_sweep_when_there_is_none(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    at = _page(tmp_path / "runs", monkeypatch)
    assert any("No recorded sweep" in i.value for i in at.info)


def test_the_page_lists_sweeps_and_plots_their_saved_replays(tmp_path, monkeypatch):
    import json

    runs = tmp_path / "runs"
    folder = make_table(runs / "sweeps" / "syn")
    record = replay(folder, ["ga", "random"], budget=25, seeds=2)
    (folder / "replays").mkdir()
    (folder / "replays" / "ga-random.json").write_text(json.dumps(record, default=str))
    at = _page(runs, monkeypatch)
    assert at.selectbox(key="replay_sweep").options == ["syn"]
    assert at.selectbox(key="replay_record").options == ["ga-random"]
    assert len(at.get("plotly_chart")) == 1
    frames = at.dataframe
    assert list(frames[0].value["strategy"]) == ["ga", "random"] and len(frames[1].value) > 100
