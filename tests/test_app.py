"""AppTest tests of every dashboard page: empty runs folder, a populated run, form validation, buttons.

AppTest runs the scripts in this process without a browser (it cannot fire ``run_every`` timers or
draw charts: tests/test_browser.py covers that). Runs are built with the real store writer
(:func:`dashboard.synthetic.build_run`) in a temporary runs folder given through ABEBOT_RUNS_DIR.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.cli import build_parser, config_from_args
from dashboard import launch as L
from dashboard.nav import PAGES as NAV_PAGES
from dashboard.synthetic import build_run
from store.control import read_control
from store.runs import atomic_write_json, read_json

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
# Every page of app.py's st.navigation (dashboard.nav.PAGES), by url path; test_pages_folder_is_navigated
# checks that this is every file of pages/.
PAGES = [url for _, _, _, url in NAV_PAGES]
NO_RUN_PAGES = {"launch", "check"}  # pages that work on no run: start one, check a kernel
TIMEOUT = 60


@pytest.fixture(autouse=True)
def no_launched_workers(monkeypatch):
    """Each test starts with an empty registry of workers started by this dashboard process."""
    monkeypatch.setattr(L, "_launched", {})


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "runs"
    folder.mkdir()
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("populated")
    return folder, build_run(folder, generations=6, population=8, seed=3)


@pytest.fixture
def populated(finished_runs, monkeypatch) -> tuple[Path, str]:
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(finished_runs[0]))
    return finished_runs


def app(page: str = "launch", query: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if query:
        at.query_params.update(query)
    at.run()
    # Always switch, even to the default page: every later run then addresses the page by the same
    # hash (AppTest restarts Streamlit's legacy multipage mode on each run; see dashboard.nav).
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    parts = [e.value for kind in ("markdown", "caption", "info", "warning", "error", "success", "title", "subheader")
             for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def submit(at: AppTest) -> AppTest:
    next(b for b in at.button if b.label == "Start run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_folders(runs: Path) -> list[Path]:
    return [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]


# -- empty runs folder ---------------------------------------------------------------------------
def test_pages_folder_is_navigated():
    """Every page file is in the navigation, under its own name (so PAGES renders every page)."""
    assert sorted(PAGES) == sorted(p.stem for p in (ROOT / "pages").glob("*.py"))
    assert [f for f, *_ in NAV_PAGES] == [f"pages/{u}.py" for u in PAGES]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_with_no_runs(runs, page):
    at = app(page)
    if page not in NO_RUN_PAGES:
        assert "No runs yet" in texts(at)
    else:
        assert "No runs yet" not in texts(at)


def test_launch_form_is_generated_from_run_config(runs):
    at = app()
    labels = {n.label for n in at.number_input}
    for name in L.MAIN_FIELDS + L.ADVANCED_FIELDS:
        if name != "selection":
            assert any(name.replace("_", " ").lower() in label.lower() or label.lower().startswith("weight")
                       for label in labels), name
    assert at.number_input(key="launch_population").value == 16
    for spec in L.weight_specs():  # one weight input per objective, from OBJECTIVES
        assert at.number_input(key=spec["key"]).value == spec["default"]
    assert [s["name"] for s in L.weight_specs()] == ["time", "memory", "stability"]
    assert "top10" in at.selectbox(key="launch_selection").options
    assert any("CPU" in str(o) for o in at.selectbox(key="launch_device").options)


# -- launch form validation ------------------------------------------------------------------------
@pytest.mark.parametrize("setup, message", [
    ({"launch_population": 1}, "population must be >= 2"),
    ({"launch_weight_time": 0.0, "launch_weight_memory": 0.0, "launch_weight_stability": 0.0},
     "fitness weights must not all be zero"),
    ({"launch_weight_memory": -1.0}, "fitness weight of memory must be a non-negative finite number"),
    ({"launch_generations": 0}, "give a budget"),
    ({"launch_elites": 16}, "elites (16) must be fewer than the population (16)"),
    ({"launch_mutation_rate": 1.5}, "mutation_rate must be <= 1.0"),
])
def test_launch_rejects_invalid_settings(runs, setup, message):
    at = app()
    for key, value in setup.items():
        at.number_input(key=key).set_value(value)
    submit(at)
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    assert run_folders(runs) == []  # nothing spawned, nothing written


@pytest.mark.parametrize("problem, message", [
    ('{"m": 64,', "problem: not valid JSON"),
    ("[64, 64]", "problem: must be a JSON object"),
    ('{"m": 0}', "m must be an integer from 1"),
    ('{"q": 3}', "has no setting q"),
])
def test_launch_rejects_bad_problem(runs, problem, message):
    at = app()
    at.text_input(key="launch_problem").input(problem)
    submit(at)
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    assert run_folders(runs) == []


def test_launch_refuses_a_busy_device(runs):
    build_run(runs, generations=2, population=4, status="running")  # heartbeat pid: this live process
    at = app()
    before = set(run_folders(runs))
    submit(at)
    assert any("busy" in w.value for w in at.warning), [w.value for w in at.warning]
    assert set(run_folders(runs)) == before


def test_second_click_is_refused(runs, monkeypatch):
    started = []

    class FakeProcess:
        pid = 0

        def poll(self):
            return None

    def fake_launch(cfg, folder):
        item = L.Launched("20260101-000000-gemm-c-0000", cfg.backend, cfg.device, FakeProcess(), __import__("time").time())
        started.append(item)
        return item

    monkeypatch.setattr(L, "launch_run", fake_launch)
    monkeypatch.setattr(L, "wait_until_listed", lambda *a, **k: False)
    at = app()
    submit(at)
    assert len(started) == 1
    submit(at)
    assert len(started) == 1
    assert any("a moment ago" in w.value for w in at.warning)


def test_cli_arguments_reproduce_the_form_config():
    cfg = L.build_config({"workload": "gemm", "backend": "c", "device": 0, "population": 6, "generations": 3,
                          "hours": 0.5, "seed": 7, "weights": {"time": 0.5, "memory": 0.25, "stability": 0.25},
                          "mutation_rate": 0.3, "elites": 1, "selection": "tournament", "tournament_size": 4,
                          "problem_text": '{"m": 64, "n": 64, "k": 64}'})
    args = build_parser().parse_args(["run", *L.run_args(cfg)])
    assert config_from_args(args) == cfg


def test_the_terminal_command_follows_the_form_before_it_is_submitted(runs):
    at = app()
    at.number_input(key="launch_population").set_value(7).run()
    at.number_input(key="launch_weight_stability").set_value(0.0).run()
    command = next(c.value for c in at.code if " -m core run " in c.value)
    assert "--population 7" in command and "stability=0.0" in command
    assert run_folders(runs) == []


def test_the_form_warm_starts_from_a_run_of_the_same_workload_and_backend(populated):
    runs_dir, run_id = populated
    at = app()
    choice = at.multiselect(key="launch_start_from")
    assert choice.options == [run_id]  # the finished gemm run on the CPU, the form's default workload and device
    choice.set_value([run_id]).run()
    command = next(c.value for c in at.code if " -m core run " in c.value)
    assert f"--start-from {run_id}" in command
    at.selectbox(key="launch_workload").set_value("rmsnorm").run()
    assert at.multiselect(key="launch_start_from").options == []  # no rmsnorm run to start from


def test_the_form_spreads_a_cpu_run_over_core_sets_and_names_a_cluster(runs):
    at = app()
    at.number_input(key="launch_core_sets").set_value(2).run()
    command = next(c.value for c in at.code if " -m core run " in c.value)
    assert "--devices 0,1" in command
    at.number_input(key="launch_core_sets").set_value(1).run()
    at.text_input(key="launch_cluster").set_value("local:2").run()
    command = next(c.value for c in at.code if " -m core run " in c.value)
    assert "--cluster local:2" in command and "--devices" not in command
    at.text_input(key="launch_cluster").set_value("http://x; rm").run()
    assert not any(" -m core run " in c.value for c in at.code)  # invalid: "fix the form first"


def test_dashboard_launch_passes_the_config_file_once(runs, monkeypatch):
    calls = {}

    class Proc:
        def poll(self):
            return None

    monkeypatch.setattr(L.subprocess, "Popen", lambda argv, **kw: calls.update(argv=argv) or Proc())
    cfg = L.build_config({"workload": "gemm", "backend": "c", "population": 4, "generations": 2, "seed": 5,
                          "weights": {"time": 1.0, "memory": 0.5, "stability": 0.0},
                          "problem_text": '{"m": 64, "n": 64, "k": 64}'})
    item = L.launch_run(cfg, runs)
    argv = calls["argv"]
    config_path = runs / ".launch" / f"{item.run_id}.json"
    assert argv == [sys.executable, "-m", "core", "run", "--config", str(config_path),
                    "--runs-dir", str(runs), "--run-id", item.run_id]  # no setting re-encoded as a flag
    assert json.loads(config_path.read_text()) == json.loads(cfg.to_json())
    assert not list(config_path.parent.glob(".*"))  # written atomically: no temp file left behind
    args = build_parser().parse_args(argv[3:])
    assert config_from_args(args) == cfg  # the worker reads back exactly the validated configuration


def test_run_weights_are_read_from_new_and_old_configs():
    from dashboard import data

    new = {"weights": {"time": 0.6, "memory": 0.3, "stability": 0.1}}
    old = {"weight_time": 0.6, "weight_memory": 0.3, "weight_stability": 0.1, "workload": "gemm"}
    assert data.run_weights(new) == data.run_weights(old) == new["weights"]
    assert data.fmt_weights(old) == "time 0.6, memory 0.3, stability 0.1" and data.fmt_weights({}) == "?"


def test_launch_spawns_the_cli_in_its_own_session(runs, monkeypatch):
    calls = {}

    class Proc:
        def poll(self):
            return None

    def fake_popen(argv, **kw):
        calls.update(argv=argv, **kw)
        return Proc()

    monkeypatch.setattr(L.subprocess, "Popen", fake_popen)
    cfg = L.build_config({"workload": "gemm", "backend": "c", "population": 4, "generations": 2,
                          "problem_text": '{"m": 64, "n": 64, "k": 64}'})
    item = L.launch_run(cfg, runs)
    assert calls["argv"][:4] == [sys.executable, "-m", "core", "run"]
    assert calls["argv"][-4:] == ["--runs-dir", str(runs), "--run-id", item.run_id]
    assert calls["start_new_session"] is True and calls["stdin"] == subprocess.DEVNULL
    assert "shell" not in calls
    assert L.busy_reason(runs, "c", 0) and "busy" in L.busy_reason(runs, "c", 0)
    assert L.busy_reason(runs, "cuda", 0) is None


# -- a populated run ---------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES[1:])
def test_every_page_renders_a_populated_run(populated, page):
    at = app(page)
    assert not at.error, [e.value for e in at.error]


def test_monitor_shows_progress_and_status(populated):
    at = app("monitor")
    assert metric(at, "Generations done") == "6 / 6"
    assert "finished" in metric(at, "Status")
    from store.runs import champion_figure

    runs, run_id = populated
    assert float(metric(at, "Champion fitness")) == pytest.approx(champion_figure(runs / run_id)["best_fitness"], abs=1e-4)
    assert not any(b.label.endswith("Pause") for b in at.button)  # a finished run has no controls


def test_query_param_selects_a_run_and_bad_ids_are_ignored(populated, tmp_path):
    runs, run_id = populated
    at = app("monitor", {"run": run_id})
    assert at.selectbox(key="run_select").value == run_id
    for bad in ("../../etc", "x/../../y", "not-a-run"):
        at = app("monitor", {"run": bad})
        assert at.selectbox(key="run_select").value == run_id
        assert any("not a run of this runs folder" in w.value for w in at.sidebar.warning)


def test_genomes_defaults_to_champion_and_parent_with_a_diff(populated):
    at = app("genomes")
    from store.reader import RunReader

    runs, run_id = populated
    champion = RunReader(runs / run_id).champion()
    assert at.selectbox(key="ind_B").value == champion["genome_hash"]
    assert at.selectbox(key="ind_A").value in json.loads(champion["parents"]) or at.selectbox(key="ind_A").value
    diffs = [c.value for c in at.code if c.language == "diff"]
    assert diffs and diffs[0].startswith("--- A/") and "+++ B/" in diffs[0]
    assert "Lineage of the champion" in texts(at)


def test_benchmark_table_lists_champion_baselines_and_roofline(populated):
    at = app("benchmark")
    table = at.dataframe[0].value
    assert list(table["name"])[:1] == ["evolved champion"]
    assert {"numpy (primary)", "roofline"} <= set(table["name"])
    assert "×" in metric(at, "vs numpy")


def test_export_writes_inside_the_run_folder_only(populated):
    runs, run_id = populated
    at = app("export")
    next(b for b in at.button if "exports/" in b.label).click().run()
    assert not at.exception
    written = list((runs / run_id / "exports").glob("champion-*/01_*"))
    assert written, list((runs / run_id).rglob("*"))
    names = {p.name for p in written[0].iterdir()}
    assert {"genome.json", "report.json", "kernel.c"} <= names
    assert not at.text_input  # no user-typed path anywhere on the page


def test_runs_page_lists_and_compares(populated):
    runs, run_id = populated
    at = app("runs")
    assert run_id in list(at.dataframe[0].value["run_id"])
    assert at.multiselect(key="compare_runs").value == [run_id]


# -- controls of a live run, and a dead run ------------------------------------------------------
@pytest.fixture
def live_run(runs) -> str:
    return build_run(runs, generations=3, population=6, status="running")  # alive: this process's pid


def test_pause_resume_stop_write_control_json(runs, live_run):
    at = app("monitor")
    assert "running" in metric(at, "Status")
    at.button(key="ctl_pause").click().run()
    assert read_control(runs / live_run) == "pause"
    assert "pause" in texts(at)
    at.button(key="ctl_stop").click().run()
    assert read_control(runs / live_run) == "stop"


def test_paused_run_offers_resume(runs, live_run):
    hb = read_json(runs / live_run / "heartbeat.json")
    atomic_write_json(runs / live_run / "heartbeat.json", {**hb, "status": "paused"})
    at = app("monitor")
    assert at.button(key="ctl_pause").disabled and not at.button(key="ctl_resume").disabled
    at.button(key="ctl_resume").click().run()
    assert read_control(runs / live_run) == "resume"


def test_dead_run_shows_log_and_resume(runs, live_run, monkeypatch):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    hb = read_json(runs / live_run / "heartbeat.json")
    atomic_write_json(runs / live_run / "heartbeat.json", {**hb, "pid": gone.pid, "pid_start": None})
    with open(runs / live_run / "worker.log", "a") as log:
        log.write("gen 2/3 best 1.0\nTraceback: the last words of the worker\n")
    resumed = []
    monkeypatch.setattr(L, "resume_run", lambda folder, run_id: resumed.append(run_id))
    at = app("monitor")
    assert "dead" in metric(at, "Status")
    assert any("the last words of the worker" in c.value for c in at.code)
    at.button(key="resume_run").click().run()
    assert resumed == [live_run]


def test_resume_clears_a_stale_stop_and_spawns_resume(runs, live_run, monkeypatch):
    from store.control import write_control

    write_control(runs / live_run, "stop")
    spawned = []

    class Proc:
        def poll(self):
            return None

    monkeypatch.setattr(L, "_spawn", lambda argv, log: spawned.append(argv) or Proc())
    L.resume_run(runs, live_run)
    assert read_control(runs / live_run) == "resume"
    assert spawned[0][:5] == [sys.executable, "-m", "core", "resume", live_run]
    assert spawned[0][-2:] == ["--runs-dir", str(runs)]


def test_monitor_of_a_run_that_is_still_starting(runs):
    folder = runs / "20260101-000000-gemm-c-beef"
    folder.mkdir()
    atomic_write_json(folder / "config.json", {"workload": "gemm", "backend": "c", "device": 0, "generations": 5,
                                               "population": 4})
    at = app("monitor")
    assert "starting" in metric(at, "Status")
    assert metric(at, "Generations done") == "0 / 5"
    for page in ("genomes", "benchmark", "export"):
        at = app(page)
        assert at.info, page  # "nothing yet" messages, no errors


def test_benchmark_remeasure_button_and_bench_json(runs, monkeypatch):
    run_id = build_run(runs, generations=3, population=6)
    started = []
    monkeypatch.setattr(L, "bench_run", lambda folder, rid: started.append(rid))
    at = app("benchmark")
    at.button(key="bench_now").click().run()
    assert started == [run_id]
    from store.reader import RunReader

    champ = RunReader(runs / run_id).champion()
    atomic_write_json(runs / run_id / "bench.json", {
        "run_id": run_id, "measured_at": 0, "rounds": 3, "genome_hash": champ["genome_hash"], "primary": "numpy",
        "flops": 1e6, "io_bytes": 1e5, "roofline_us": None, "device": {"name": "cpu", "backend": "c", "index": 0},
        "champion": {"time_us": 10.0, "spread_us": 0.1, "memory_bytes": 1000},
        "baselines": {"numpy": {"time_us": 20.0, "spread_us": 0.2, "memory_bytes": 900}}})
    at = app("benchmark")
    assert at.radio(key="bench_source").value == "re-measured"
    assert metric(at, "vs numpy") == "2.00×"
    # core bench's pairs, second method, host overhead, noisy mark and cache policy are shown (issue 27)
    atomic_write_json(runs / run_id / "bench.json", {
        "run_id": run_id, "measured_at": 0, "rounds": 3, "genome_hash": champ["genome_hash"], "primary": "numpy",
        "flops": 1e6, "io_bytes": 1e5, "roofline_us": None, "device": {"name": "cpu", "backend": "c", "index": 0},
        "cache": "cold", "evict": "clflush of the call's buffers",
        "champion": {"time_us": 10.0, "spread_us": 0.1, "memory_bytes": 1000, "speedup": 2.5, "noisy": True,
                     "independent_us": 11.0, "host_overhead_us": None},
        "baselines": {"numpy": {"time_us": 20.0, "spread_us": 0.2, "memory_bytes": 900, "speedup": 2.5,
                                "independent_us": 26.0, "host_overhead_us": 3.5, "noisy": False}}})
    at = app("benchmark")
    assert metric(at, "vs numpy") == "2.50×"  # the paired figure, not 20 / 10
    table = at.dataframe[0].value
    numpy_row = table[table["name"] == "numpy (primary)"].iloc[0]
    assert numpy_row["champion_speedup"] == "2.50× (pairs)"
    assert numpy_row["independent_us"] == 26.0 and numpy_row["host_overhead_us"] == 3.5
    assert table[table["name"] == "evolved champion"].iloc[0]["noisy"] == "NOISY"
    assert any("Cache policy: **cold**" in c.value for c in at.caption)
    at.radio(key="bench_source").set_value("run start").run()
    assert metric(at, "vs numpy") != "2.00×"


def test_streamlit_binds_loopback_and_sends_no_usage_stats():
    import tomllib

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["browser"]["gatherUsageStats"] is False


# -- a run evolved on the H200 and brought back ---------------------------------------------------
H200_RUNS = ROOT / "benchmarks" / "h200_runs"


H200_RUN_IDS = sorted(p.name for p in H200_RUNS.iterdir() if p.is_dir())


@pytest.fixture
def h200_runs(tmp_path, monkeypatch) -> Path:
    import shutil

    folder = tmp_path / "runs"
    shutil.copytree(H200_RUNS, folder)
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(folder))
    return folder


@pytest.mark.parametrize("run_id", H200_RUN_IDS)
@pytest.mark.parametrize("page", ["monitor", "genomes", "benchmark", "runs"])
def test_run_folders_from_the_h200_open_in_the_dashboard(h200_runs, run_id, page):
    at = app(page, {"run": run_id})
    shown = texts(at) + " ".join(str(t.value) for t in at.table) + " ".join(str(d.value) for d in at.dataframe)
    assert run_id in shown or page in ("genomes", "benchmark")
    if page == "benchmark":
        assert ("cublas" if "gemm" in run_id else "vllm_native_compile") in shown.lower()


# -- the machine's noise ---------------------------------------------------------------------------
def test_monitor_shows_the_baseline_noise_and_marks_noisy_generations(runs):
    from store.runs import new_run_id
    from store.writer import RunWriter

    config = {"workload": "gemm", "backend": "c", "device": 0, "population": 2, "generations": 3,
              "problem": {"m": 64, "n": 64, "k": 64}}
    w = RunWriter.create(runs, new_run_id("gemm", "c"), config)
    try:
        for g, (t, rel) in enumerate([(100.0, 0.01), (180.0, 0.4), (101.0, 0.08)]):
            rows = [{"genome_hash": f"h{i}", "genome": {"parallel_config": {"tile": i}}, "origin": "random",
                     "status": "ok", "fitness": 0.5 + i, "time_us": 50.0, "memory_bytes": 1000, "stability": 1.0,
                     "pareto_rank": 0, "remeasured": bool(g and i), "time_samples_us": "[50.0]"} for i in range(2)]
            summary = {"best_fitness": 1.5, "mean_fitness": 1.0, "worst_fitness": 0.5, "n_evaluated": 2 - bool(g),
                       "n_lethal": 0, "best_time_us": 50.0, "best_memory_bytes": 1000, "champion_hash": "h1",
                       "baseline_primary": "numpy", "baseline_time_us": t, "baseline_spread_us": rel * t,
                       "baseline_rel_spread": rel, "baseline_samples_us": json.dumps([t] * 3), "noisy": rel > 0.05,
                       "n_remeasured": int(bool(g)), "champion_time_us": 50.0, "champion_spread_us": 0.5,
                       "champion_samples": g + 1}
            w.commit_generation(g, rows, [], summary, {"rng": []})
        w.set_status("finished")
    finally:
        w.close()
    at = app("monitor")
    assert metric(at, "Baseline noise") == "±8.0 %"
    delta = next(m.delta for m in at.metric if m.label == "Baseline noise")
    assert delta == "2 of 3 generations noisy"
    caption = texts(at)
    assert "champion 50.0 µs, median of 3 timings (IQR 0.5 µs)" in caption and "baseline numpy 101.0 µs ±8.0 % (noisy)" in caption
    figure = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "Best time" in c.proto.spec)
    names = [trace.get("name") for trace in figure["data"]]
    assert "baseline (µs)" in names and "noisy generation (spread > 5 %)" in names
    noisy = next(trace for trace in figure["data"] if trace.get("name", "").startswith("noisy"))
    xs = noisy["x"]
    if isinstance(xs, dict):  # Plotly 6 sends arrays base64-encoded
        import base64

        import numpy as np

        xs = np.frombuffer(base64.b64decode(xs["bdata"]), dtype=xs["dtype"]).tolist()
    assert list(xs) == [1, 2]


def test_monitor_shows_each_devices_share_baseline_and_health(runs):
    from store.runs import new_run_id
    from store.writer import RunWriter

    config = {"workload": "gemm", "backend": "c", "device": 0, "devices": "0,1", "population": 4, "generations": 1,
              "problem": {"m": 64, "n": 64, "k": 64}}
    w = RunWriter.create(runs, new_run_id("gemm", "c"), config)
    try:
        rows = [{"genome_hash": f"h{i}", "genome": {"parallel_config": {"tile": i}}, "origin": "random",
                 "status": "crashed" if i == 3 else "ok", "fitness": 0.5, "time_us": 50.0, "memory_bytes": 1000,
                 "stability": 1.0, "pareto_rank": 0, "device": "c:0" if i == 0 else "c:1", "device_time_us": 50.0}
                for i in range(4)]
        summary = {"best_fitness": 0.5, "mean_fitness": 0.5, "worst_fitness": 0.5, "n_evaluated": 4, "n_lethal": 1,
                   "best_time_us": 50.0, "best_memory_bytes": 1000, "champion_hash": "h0", "baseline_time_us": 100.0,
                   "baseline_devices": json.dumps({"c:0": 100.0, "c:1": 120.0})}
        w.commit_generation(0, rows, [], summary, {"rng": []})
        w.set_status("finished")
    finally:
        w.close()
    at = app("monitor")
    table = next(df.value for df in at.dataframe if "share" in df.value.columns)
    assert table.to_dict("list") == {"device": ["c:0", "c:1"], "evaluations": [1, 3], "share": ["25 %", "75 %"],
                                     "latest baseline": ["100.0 µs", "120.0 µs"], "health": ["ok", "1 crashed or timed out"]}


def test_a_run_from_before_retiming_shows_no_noise(populated):
    at = app("monitor")
    assert metric(at, "Baseline noise") == "—"


# -- issue 11, part A: the walk-through's defects ---------------------------------------------------
def figure(at: AppTest, key_text: str) -> dict:
    return next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if key_text in c.proto.spec)


def decoded(values):
    if isinstance(values, dict):  # Plotly 6+ sends arrays base64-encoded
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_compare_shows_a_one_generation_run_and_fits_the_y_axis(runs):
    build_run(runs, generations=1, population=4, seed=2)
    at = app("runs")
    fig = figure(at, "Best fitness per run")
    trace = fig["data"][0]
    assert "markers" in trace["mode"]
    top = max(decoded(trace["y"]))
    assert fig["layout"]["yaxis"]["range"] == pytest.approx([0, top * 1.1])
    caption = texts(at)
    assert "how far each got past its baseline, not in absolute time" not in caption
    assert "not comparable" in caption


def test_benchmark_table_has_no_self_speedup_no_none_and_the_metrics_unit(runs):
    run_id = build_run(runs, generations=2, population=4)
    at = app("benchmark")
    table = at.dataframe[0].value
    champion = table[table["name"] == "evolved champion"].iloc[0]
    assert champion["champion_speedup"] == ""  # not "1.00×"
    assert all(v.endswith("×") for v in table[~table["name"].isin(["evolved champion", "roofline"])]["champion_speedup"])
    assert "None" not in table.astype(str).to_string()
    base_mem = 3 * 64 * 64 * 4  # the synthetic baseline: 48 KiB, shown in KiB in the metrics too
    assert table[table["name"] == "numpy (primary)"]["memory_bytes"].iloc[0] == pytest.approx(base_mem / 1024)
    bars = figure(at, "Time per implementation")["data"][0]
    assert bars["textposition"] == "inside" and bars["insidetextanchor"] == "start"
    # Without a roofline: say why instead of a bare dash.
    base = json.loads((runs / run_id / "live" / "baseline.json").read_text())
    atomic_write_json(runs / run_id / "live" / "baseline.json", {**base, "roofline_us": None})
    at = app("benchmark")
    assert metric(at, "Of the roofline") == "n/a"
    assert "no roofline:" in texts(at)
    assert "empty kernel's launch" not in texts(at)  # the CPU has none to time
    atomic_write_json(runs / run_id / "live" / "baseline.json", {**base, "launch_us": 0.75})  # as a GPU's baseline has
    assert "an empty kernel's launch 0.75 µs" in texts(app("benchmark"))


def test_benchmark_before_any_champion_shows_no_none(runs):
    from store.runs import new_run_id
    from store.writer import RunWriter

    w = RunWriter.create(runs, new_run_id("gemm", "c"), {"workload": "gemm", "backend": "c", "generations": 2})
    w.set_baseline({"primary": "numpy", "time_us": 100.0, "memory_bytes": 1000, "flops": 1e6, "io_bytes": 1000,
                    "baselines": {"numpy": {"time_us": 100.0, "spread_us": None, "memory_bytes": 1000}}})
    w.close()
    at = app("benchmark")
    assert "None" not in at.dataframe[0].value.astype(str).to_string()


def test_best_time_and_memory_are_best_so_far_on_a_round_axis(populated):
    at = app("monitor")
    fig = figure(at, "Best time and memory so far")
    for name in ("best time so far", "least memory so far"):
        ys = decoded(next(t for t in fig["data"] if t.get("name", "").startswith(name))["y"])
        assert all(b <= a for a, b in zip(ys, ys[1:])), (name, ys)
    assert fig["layout"]["yaxis2"]["rangemode"] == "tozero"
    assert fig["layout"]["yaxis2"]["tickmode"] == "auto"  # not plotly.js 4's ticks synced to the time axis


def test_pareto_is_padded_has_no_useless_colour_bar_and_round_log_ticks():
    import pandas as pd

    from dashboard import charts

    pts = pd.DataFrame({"genome_hash": list("abc"), "time_us": [10.0, 30.0, 900.0], "fitness": [1.0, 0.5, 0.1],
                        "memory_bytes": [2**20, 2**20 + 10_000, 2**20 + 30_000], "stability": [1.0, 1.0, 1.0],
                        "pareto_rank": [0, 1, 2]})
    fig = charts.pareto(pts, 3).to_plotly_json()
    assert "colorbar" not in fig["data"][0]["marker"]  # every point has the same stability
    lo, hi = fig["layout"]["yaxis"]["range"]
    mem = pts["memory_bytes"] / 2**10  # KiB
    assert lo < mem.min() and hi > mem.max()  # nothing clipped at an edge
    assert (hi - lo) >= 0.1 * mem.mean()  # 29 KiB on 1 MiB is not drawn as a big difference
    ticks = fig["layout"]["xaxis"]["tickvals"]
    assert fig["layout"]["xaxis"]["type"] == "log" and set(ticks) <= {10, 20, 50, 100, 200, 500, 1000}
    varied = charts.pareto(pts.assign(stability=[1.0, 0.5, 0.2]), 3).to_plotly_json()
    assert "colorbar" in varied["data"][0]["marker"]


@pytest.mark.parametrize("generations", [1, 50, 51, 5000])
def test_lethal_causes_are_bars_on_a_short_run_and_one_stacked_step_path_per_cause_on_a_long_one(generations):
    import pandas as pd

    from dashboard import charts

    causes = pd.DataFrame([(g, c, 1 + g % 3) for g in range(generations) for c in ("timeout", "crashed")
                           if c == "timeout" or g % 2], columns=["generation", "cause", "count"])
    fig = charts.lethal(causes)
    assert len(fig.data) == causes["cause"].nunique()
    bars = generations <= charts.LETHAL_BARS_UP_TO
    assert {t.type for t in fig.data} == {"bar" if bars else "scatter"}
    for t in fig.data:  # every count drawn, at its generation
        part = causes[causes["cause"] == t.name]
        assert list(t.x) == list(part["generation"]) and list(t.y) == list(part["count"])
    if not bars:  # stacked, a cause absent from a generation counting as zero there
        assert {(t.stackgroup, t.line.shape, t.mode) for t in fig.data} == {("lethal", "hv", "lines")}
        assert all(t.stackgaps in (None, "infer zero") for t in fig.data)  # None: Plotly's default, "infer zero"


def test_generations_are_counted_one_way_everywhere(populated, capsys):
    from core.cli import main

    runs, run_id = populated  # 6 generations, numbered 0..5
    at = app("monitor")
    assert metric(at, "Generations done") == "6 / 6"
    assert "6 of 6 generations done (last: generation 5)" in at.get("progress")[0].proto.text
    at = app("runs")
    assert at.dataframe[0].value.set_index("run_id").loc[run_id, "done"] == "6 / 6"
    assert "6 of 6 generations done" in at.sidebar.caption[-1].value if at.sidebar.caption else True
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert " done " in out.splitlines()[0] and "6/6" in out


def test_population_below_elites_says_what_to_do_and_finished_runs_are_not_resumed(populated, capsys):
    from core.cli import build_parser, main

    runs, run_id = populated
    assert main(["run", "--population", "2", "--generations", "1", "--runs-dir", str(runs)]) == 2
    assert "raise the population to 3" in capsys.readouterr().err
    run_help = next(a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
                    if "--population" in a.option_strings).help
    assert "elites" in run_help
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (runs / run_id).rglob("*"))
    assert main(["resume", run_id, "--runs-dir", str(runs)]) == 0
    assert "already finished" in capsys.readouterr().out
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (runs / run_id).rglob("*")) == before  # nothing re-measured


def test_runs_page_opens_monitor_in_the_same_session(populated):
    runs, run_id = populated
    at = app("runs")
    assert "open" not in at.dataframe[0].value.columns  # no link column opening a new tab
    at.button(key="open_monitor").click().run()
    assert not at.exception
    assert metric(at, "Generations done") == "6 / 6"  # now on Monitor, same AppTest session


def test_labels_fit_and_the_configuration_reads_as_text(populated):
    runs, run_id = populated
    at = app("monitor")
    assert at.selectbox(key="run_select").options == [run_id]  # the id alone; details go in a caption
    caption = at.caption[0].value
    assert "m=64" in caption and "float32" in caption and "{" not in caption and "'" not in caption
    at = app("launch")
    assert at.selectbox(key="launch_workload").options[0] == "gemm"


EMOJI = re.compile("[\U0001F000-\U0001FFFF\u2300-\u23FF\u2600-\u27BF\u2B00-\u2BFF\uFE0F]")


@pytest.mark.parametrize("page", PAGES)
def test_no_emoji_anywhere(populated, page):
    from dashboard.nav import PAGES

    assert not any(EMOJI.search(icon) for _, _, icon, _ in PAGES)
    at = app(page)
    shown = texts(at) + " ".join(str(b.label) for b in at.button) + " ".join(str(m.value) for m in at.metric)
    shown += " ".join(str(e.proto) for e in at.get("alert")) if hasattr(at, "get") else ""
    assert not EMOJI.search(shown), EMOJI.findall(shown)


def test_the_exported_zip_has_a_readme_requirements_and_the_shape_warning(populated):
    import io
    import zipfile

    from core.tools.export import export_zip

    runs, run_id = populated
    names = zipfile.ZipFile(io.BytesIO(export_zip(runs / run_id))).namelist()
    z = zipfile.ZipFile(io.BytesIO(export_zip(runs / run_id)))
    readme = z.read(next(n for n in names if n.endswith("/README.md") and n.count("/") == 1)).decode()
    reqs = z.read(next(n for n in names if n.endswith("/requirements.txt"))).decode()
    assert "Tuned for one shape" in readme and "m=64" in readme and "run_kernel.py --problem" in readme
    assert "numpy==" in reqs and "OpenMP" in reqs


def test_resume_while_paused_does_not_promise_the_end_of_a_generation(runs, live_run):
    hb = read_json(runs / live_run / "heartbeat.json")
    atomic_write_json(runs / live_run / "heartbeat.json", {**hb, "status": "paused"})
    at = app("monitor")
    at.button(key="ctl_resume").click().run()
    shown = texts(at)
    assert "within a second or two" in shown and "end of the current generation" not in shown


# -- issue 11, part B: what Optuna and W&B users expect ----------------------------------------------
def test_individuals_table_filters_sorts_and_exports(populated):
    import io

    import pandas as pd

    from store.queries import IndividualsTable

    runs, run_id = populated
    table = IndividualsTable(runs / run_id)
    assert table.rows == 6 * 8
    assert "gene.parallel_config.tile_m" in table.genes and "time_term" in table.columns
    ok = table.query({"status": ["ok"]}, sort="time_us", descending=False, limit=None)
    assert (ok["status"] == "ok").all() and list(ok["time_us"]) == sorted(ok["time_us"])
    tile = table.distinct("gene.parallel_config.tile_m")[0]
    only = table.query({"in": {"gene.parallel_config.tile_m": [tile]}, "generation": (2, 3)}, limit=None)
    assert len(only) == table.count({"in": {"gene.parallel_config.tile_m": [tile]}, "generation": (2, 3)}) > 0
    assert set(only["gene.parallel_config.tile_m"]) == {tile} and set(only["generation"]) <= {2, 3}
    assert len(pd.read_csv(io.BytesIO(table.export({"status": ["ok"]}, "csv")))) == len(ok)
    assert len(pd.read_parquet(io.BytesIO(table.export(None, "parquet")))) == 48
    latest = table.latest_sample(None, ["generation", "fitness"], 1000)
    assert latest["genome_hash"].is_unique and len(latest) == table.query(limit=None)["genome_hash"].nunique()
    assert len(table.latest_sample(None, ["fitness"], 5)) == 5
    with pytest.raises(ValueError):
        table.query(sort="fitness; DROP TABLE t")


def test_individuals_page_shows_a_selected_kernel_and_gene_importance(populated):
    at = app("individuals")
    assert "48 of 48 individuals match" in texts(at)
    at.multiselect(key="ind_status").set_value(["ok"]).run()
    shown = at.dataframe(key="ind_table").value
    assert (shown["status"] == "ok").all() and len(shown) < 48
    assert [d.label for d in at.get("download_button")] == ["CSV", "Parquet"]
    assert any("Gene importance" in c.proto.spec for c in at.get("plotly_chart"))
    assert parallel_spec(at)["layout"]["title"]["text"].startswith("Genes against fitness")


def parallel_spec(at: AppTest) -> dict:
    """The Individuals page's parallel-coordinates figure, as the browser receives it."""
    found = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("-chart_parallel")]
    assert len(found) == 1, "the parallel-coordinates chart is missing"
    return found[0]


def plotly_array(value) -> list:
    """A trace's array from a Plotly spec: a list, or numpy's bytes in base64 (Plotly >= 6)."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value)


def parallel_lines(spec: dict) -> tuple[list[str], list[float], list[list[str]]]:
    """The axes (gene short names, then fitness), and per line (genome) its fitness and gene values."""
    axes = spec["layout"]["xaxis"]["ticktext"]
    dots = next(t for t in spec["data"] if t.get("name") == "genomes")
    return axes, plotly_array(dots["marker"]["color"]), [list(r) for r in dots["customdata"]]


def test_individuals_parallel_coordinates_follow_the_table_filter(populated):
    """The plot of genes against fitness draws one line per distinct genome that the table's filter
    keeps (all of them here: fewer than 500), in SVG, and a new filter redraws it with only those."""
    from store.queries import IndividualsTable

    runs, run_id = populated
    table = IndividualsTable(runs / run_id)

    def expected(filters: dict) -> list[float]:
        rows = table.latest_sample(filters, ["fitness"], 3000).dropna(subset=["fitness"])
        return sorted(rows["fitness"].round(9))

    at = app("individuals")
    spec = parallel_spec(at)
    assert {t["type"] for t in spec["data"]} == {"scatter"}  # SVG: no WebGL parcoords/scattergl
    axes, fitness, genes = parallel_lines(spec)
    assert axes[-1] == "fitness" and "tile_m" in axes and len(axes) == min(8, len(table.genes)) + 1
    assert sorted(round(f, 9) for f in fitness) == expected({}) and len(fitness) > 20
    # Categorical genes are labelled by value on their axis.
    labels = next(t for t in spec["data"] if t.get("name") == "values")["text"]
    tile = table.distinct("gene.parallel_config.tile_m")[0]
    assert str(tile) in labels
    # Filter the table on one value of one gene: the plot keeps only the genomes that have it.
    at.multiselect(key="ind_gene_pick").set_value(["gene.parallel_config.tile_m"]).run()
    at.multiselect(key="ind_gene_gene.parallel_config.tile_m").set_value([tile]).run()
    assert not at.exception, [e.value for e in at.exception]
    axes, fitness, genes = parallel_lines(parallel_spec(at))
    want = expected({"in": {"gene.parallel_config.tile_m": [tile]}})
    assert sorted(round(f, 9) for f in fitness) == want and 0 < len(want) < len(expected({}))
    # The plot's axes are the most important genes of the filtered rows: tile_m no longer varies
    # there, so it is either gone or holds only the chosen value.
    assert "tile_m" not in axes or {row[axes.index("tile_m")] for row in genes} == {str(tile)}
    assert parallel_spec(at)["layout"]["title"]["text"] == f"Genes against fitness ({len(want):,} rows)"
    # And a status filter on top of it.
    at.multiselect(key="ind_status").set_value(["ok"]).run()
    _, fitness, _ = parallel_lines(parallel_spec(at))
    assert sorted(round(f, 9) for f in fitness) == expected({"status": ["ok"], "in": {"gene.parallel_config.tile_m": [tile]}})


@pytest.fixture(scope="module")
def paged_run(tmp_path_factory) -> tuple[Path, str]:
    """A run of 120 individuals: more than one page of the Individuals table at every page size but 500."""
    folder = tmp_path_factory.mktemp("paged")
    return folder, build_run(folder, generations=15, population=8, seed=5)


def test_individuals_table_pages_in_sql_without_overlap_and_refreshes_new_generations(paged_run, tmp_path):
    import io
    import shutil

    import pandas as pd

    from store.queries import IndividualsTable

    runs, run_id = paged_run
    table = IndividualsTable(runs / run_id)
    everything = table.query(sort="time_us", descending=False, limit=None)
    pages = [table.query(sort="time_us", descending=False, limit=50, offset=o) for o in (0, 50, 100)]
    assert [len(p) for p in pages] == [50, 50, 20]
    stacked = pd.concat(pages, ignore_index=True)
    assert stacked.equals(everything)  # the pages are the full ordering cut in three: no overlap, no gap
    assert not set(zip(pages[0]["generation"], pages[0]["genome_hash"])) & set(zip(pages[1]["generation"], pages[1]["genome_hash"]))
    ok = stacked["time_us"].dropna()
    assert list(ok) == sorted(ok) and stacked["time_us"].isna().sum() == everything["status"].ne("ok").sum()
    # The download follows the same order and filter, every matching row.
    ok_rows = table.count({"status": ["ok"]})
    csv = pd.read_csv(io.BytesIO(table.export({"status": ["ok"]}, "csv", "time_us", False)))
    assert len(csv) == ok_rows < 120 and list(csv["time_us"]) == sorted(csv["time_us"])
    # refresh() appends the generations committed since, and only those.
    copy = tmp_path / run_id
    shutil.copytree(runs / run_id, copy)
    later = sorted((copy / "live" / "individuals").glob("gen_*.parquet"))[10:]
    aside = tmp_path / "aside"
    aside.mkdir()
    for f in later:
        shutil.move(f, aside / f.name)
    partial = IndividualsTable(copy)
    assert (partial.rows, partial.last_generation) == (80, 9) and partial.refresh() == 0
    for f in later:
        shutil.move(aside / f.name, copy / "live" / "individuals" / f.name)
    assert partial.refresh() == 40 and (partial.rows, partial.last_generation) == (120, 14)
    assert partial.query(limit=None, sort="generation").equals(table.query(limit=None, sort="generation"))


def test_individuals_page_pages_sorts_and_counts_in_the_database(paged_run, monkeypatch):
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(paged_run[0]))
    at = app("individuals")
    assert "120 of 120 individuals match" in texts(at) and "page 1 of 2" in texts(at)
    first = at.dataframe(key="ind_table").value
    assert len(first) == 100 and list(first["fitness"]) == sorted(first["fitness"], reverse=True)
    at.number_input(key="ind_page").set_value(2).run()
    second = at.dataframe(key="ind_table").value
    assert len(second) == 20 and "rows 101–120 shown (page 2 of 2)" in texts(at)
    assert not set(first["genome_hash"] + first["generation"].astype(str)) & set(
        second["genome_hash"] + second["generation"].astype(str))
    assert second["fitness"].max() <= first["fitness"].min()  # page 2 continues the order of page 1
    # Ascending time: page 1 of the new order, sorted over every row, not only those on screen.
    at.selectbox(key="ind_sort").set_value("time_us").run()
    at.toggle(key="ind_desc").set_value(False).run()
    assert at.number_input(key="ind_page").value == 1
    at.selectbox(key="ind_page_size").set_value(50).run()
    page1 = at.dataframe(key="ind_table").value
    at.number_input(key="ind_page").set_value(2).run()
    page2 = at.dataframe(key="ind_table").value
    assert list(page1["time_us"]) == sorted(page1["time_us"]) and page1["time_us"].max() <= page2["time_us"].min()
    # A filter: the count is the database's, and the page goes back to the first.
    at.multiselect(key="ind_status").set_value(["ok"]).run()
    from store.queries import IndividualsTable
    ok = IndividualsTable(paged_run[0] / paged_run[1]).count({"status": ["ok"]})
    assert f"{ok} of 120 individuals match" in texts(at) and at.number_input(key="ind_page").value == 1
    assert (at.dataframe(key="ind_table").value["status"] == "ok").all()
    assert any("fittest distinct genomes" in c.value or "Every one of the" in c.value for c in at.caption)


def test_parallel_coordinates_keep_the_fittest_and_sample_the_rest():
    import numpy as np
    import pandas as pd

    from dashboard.importance import parallel_caption, parallel_frame

    rng = np.random.default_rng(1)
    n = 2000
    frame = pd.DataFrame({"genome_hash": [f"h{i}" for i in range(n)], "gene.a": rng.choice(["1", "2"], n),
                          "fitness": rng.random(n)})
    best = frame.nlargest(100, "fitness")
    out = parallel_frame(frame, ["gene.a"], max_rows=500, fittest=best, top=100)
    assert len(out) == 500 and out.attrs["top"] == 100
    assert set(out["fitness"].nlargest(100)) == set(best["fitness"])  # the 100 fittest are all drawn
    assert "the 100 fittest" in parallel_caption(out, n) and "400 others" in parallel_caption(out, n)
    small = parallel_frame(frame.head(50), ["gene.a"], fittest=frame.head(50).nlargest(10, "fitness"))
    assert len(small) == 50 and small.attrs["top"] == 0 and "Every one of the 50" in parallel_caption(small, 50)


def test_parallel_coordinates_chart_is_svg_coloured_by_fitness_with_value_labels():
    import numpy as np
    import pandas as pd

    from dashboard import parallel_chart

    rng = np.random.default_rng(2)
    n = 500
    frame = pd.DataFrame({"gene.g.tile": rng.choice(["8", "16", "32", "128"], n),
                          "gene.g.layout": rng.choice(["row", "blocked"], n), "fitness": rng.random(n)})
    fig = parallel_chart.parallel(frame, ["gene.g.tile", "gene.g.layout"])
    assert {t.type for t in fig.data} == {"scatter"}  # no WebGL: drawn fast by a GPU-less browser
    assert list(fig.layout.xaxis.ticktext) == ["tile", "layout", "fitness"]
    labels = next(t for t in fig.data if t.name == "values")
    tile_labels = [t for x, t in zip(labels.x, labels.text) if x == 0]
    assert tile_labels == ["8", "16", "32", "128"]  # numbers in numeric order, each value labelled
    assert set(t for x, t in zip(labels.x, labels.text) if x == 1) == {"row", "blocked"}
    bands = [t for t in fig.data if (t.name or "").startswith("fitness band")]
    assert 1 < len(bands) <= parallel_chart.PARALLEL_BANDS
    # Every row is one line: k + 1 points and a break, in the band of its fitness.
    assert sum(len(t.x) for t in bands) == n * 4
    lows = [t for t in bands if t.name == "fitness band 1"][0]
    assert lows.line.color != bands[-1].line.color
    dots = next(t for t in fig.data if t.name == "genomes")
    assert len(dots.x) == n and dots.marker.colorscale and np.allclose(sorted(dots.marker.color), sorted(frame["fitness"]))
    assert parallel_chart.parallel(frame.iloc[0:0], ["gene.g.tile"]).layout.annotations[0].text == "no rows match the filter"
    one = parallel_chart.parallel(frame.head(1), ["gene.g.tile"])  # one row: no division by a zero span
    assert len(next(t for t in one.data if t.name == "genomes").x) == 1


def test_gene_importance_finds_the_gene_that_decides_fitness():
    import numpy as np
    import pandas as pd

    from dashboard.importance import gene_importance

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"genome_hash": [f"h{i}" for i in range(n)],
                          "gene.a": rng.choice(["8", "16", "32"], n), "gene.b": rng.choice(["x", "y"], n),
                          "gene.c": rng.choice(["p", "q", "r", "s"], n)})
    frame["fitness"] = frame["gene.a"].map({"8": 0.2, "16": 1.0, "32": 0.5}) + rng.normal(0, 0.02, n)
    imp = gene_importance(frame, ["gene.a", "gene.b", "gene.c"])
    assert imp["gene"].iloc[0] == "gene.a" and imp["importance"].iloc[0] > 10 * max(imp["importance"].iloc[1:].max(), 0.01)
    assert imp["r2"].iloc[0] > 0.9


def test_noisy_generation_badge_and_benchmark_disagreement():
    import pandas as pd

    from dashboard.benchmark import bench_warnings
    from dashboard.live import noisy_badge

    gens = pd.DataFrame({"generation": [0, 1], "noisy": [False, True], "baseline_rel_spread": [0.01, 0.2]})
    assert noisy_badge(gens, 0) is None and "noisy (baseline spread ±20.0 %)" in noisy_badge(gens, 1)
    bench = {"genome_hash": "h", "primary": "numpy", "champion": {"time_us": 10.0, "rounds_us": [10.0, 10.1, 14.0]},
             "baselines": {"numpy": {"time_us": 20.0, "rounds_us": [20.0, 20.1, 20.2]}}}
    warnings = bench_warnings(bench, {"time_us": 30.0}, {"genome_hash": "h", "time_us": 10.0})
    assert any("rounds disagree for the champion" in w for w in warnings)
    assert any("disagrees with the run's own figures (3.00×)" in w for w in warnings)
    calm = {**bench, "champion": {"time_us": 10.0, "rounds_us": [10.0, 10.1, 10.2]}}
    assert bench_warnings(calm, {"time_us": 20.5}, {"genome_hash": "h", "time_us": 10.0}) == []


def test_champion_timeline_opens_the_diff_in_genomes(populated):
    at = app("monitor")
    assert "Champion changes" in texts(at)
    marked = next(t for t in figure(at, "Fitness per generation")["data"] if t.get("name") == "champion changed")
    changes = at.selectbox(key="timeline_pick").options
    assert len(decoded(marked["x"])) >= len(changes) > 0  # each change marked (the first has no parent to diff)
    assert not at.dataframe  # the table waits to be asked for: a new tab loads no table script
    at.toggle(key="timeline_table").set_value(True).run()
    assert len(at.dataframe[0].value) == len(decoded(marked["x"]))
    change = at.selectbox(key="timeline_pick")
    assert change.options
    at.button(key="timeline_open").click().run()
    assert not at.exception
    a, b = at.selectbox(key="ind_A").value, at.selectbox(key="ind_B").value
    assert a != b and any(c.language == "diff" for c in at.code)


def test_monitor_log_tail_wall_clock_axis_and_machine_load(runs, live_run):
    with open(runs / live_run / "worker.log", "a") as log:
        log.write("gen 2/3 best 1.0 the newest line\n")
    at = app("monitor")
    assert any("the newest line" in c.value for c in at.code)
    assert "cores" in metric(at, "Machine load")
    at.toggle(key="x_wall").set_value(True).run()
    assert figure(at, "Fitness per generation")["layout"]["xaxis"]["title"]["text"] == "wall-clock time (UTC)"


def test_runs_name_notes_filter_relaunch_archive_delete(runs):
    first = build_run(runs, generations=2, population=4, seed=1)
    second = build_run(runs, generations=2, population=5, seed=2, workload="rmsnorm")
    at = app("runs")
    assert {"population", "selection", "weights", "problem", "device", "baseline"} <= set(at.dataframe[0].value.columns)
    at.multiselect(key="runs_workload").set_value(["rmsnorm"]).run()
    assert list(at.dataframe[0].value["run_id"]) == [second]
    at.multiselect(key="runs_workload").set_value([]).run()
    at.selectbox(key="runs_pick").set_value(first).run()
    at.text_input(key=f"meta_name_{first}").input("tile sweep")
    at.text_area(key=f"meta_notes_{first}").input("quiet machine")
    at.button[[b.label for b in at.button].index("Save name and notes")].click().run()
    assert json.loads((runs / first / "meta.json").read_text()) == {"name": "tile sweep", "notes": "quiet machine"}
    assert at.dataframe[0].value.set_index("run_id").loc[first, "name"] == "tile sweep"
    at.multiselect(key="compare_runs").set_value([first, second]).run()
    diff = at.dataframe[-1].value
    assert diff.set_index("setting").loc["population", "differs"]
    # Archive needs the confirmation; then the run leaves the list but keeps its files.
    assert at.button(key="archive_run").disabled
    at.checkbox(key=f"confirm_{first}").check().run()
    at.button(key="archive_run").click().run()
    assert not (runs / first).exists() and (runs / ".archive" / first / "config.json").exists()
    at.selectbox(key="runs_pick").set_value(second).run()
    at.button(key="relaunch").click().run()
    assert at.number_input(key="launch_population").value == 5 and at.selectbox(key="launch_workload").value == "rmsnorm"


def test_a_live_run_cannot_be_archived_or_deleted(runs, live_run):
    at = app("runs")
    assert any("stop it on Monitor first" in i.value for i in at.info)
    assert at.button(key="delete_run").disabled and at.button(key="archive_run").disabled
    from dashboard import manage

    assert manage.live_reason(runs, live_run)


def test_check_page_runs_core_check_under_the_device_lock(runs):
    from core.run.device_lock import hold_device

    source = (ROOT / "tests" / "cheats" / "gemm_write_after_output.c").read_bytes()
    at = app("check")
    at.file_uploader(key="check_file").upload("mine.c", source, "text/x-c").run()
    at.text_input(key="check_problem").input('{"m": 64, "n": 64, "k": 64}').run()
    at.button(key="check_run").click().run(timeout=120)
    assert any("wrong_result" in e.value for e in at.error), [e.value for e in at.error]
    assert "max_abs_err" in at.dataframe[0].value.columns
    assert (runs / ".check").is_dir() and not list((runs / ".check").iterdir())  # inside the runs folder, cleaned up
    with hold_device(runs, "c", 0, "test holder"):
        at.button(key="check_run").click().run(timeout=120)
    assert any("test holder" in e.value for e in at.error), [e.value for e in at.error]


def test_warm_up_waits_while_a_page_is_being_computed(monkeypatch):
    """The background warm-up (dashboard.nav.warm_up) never competes with a script run for the GIL."""
    import gc
    import threading
    import time

    from dashboard import nav

    done = []
    monkeypatch.setattr(nav, "WARM_MODULES", ("json", "dashboard.charts"))
    monkeypatch.setattr(nav, "_first_element_check", lambda: done.append("check"))
    monkeypatch.setattr(gc, "freeze", lambda: done.append("freeze"))
    monkeypatch.setattr(nav, "_prefetch_steps", lambda: [])  # tests/test_prefetch.py covers the read-ahead
    release = threading.Event()
    script = threading.Thread(target=release.wait, name="ScriptRunner.scriptThread")  # Streamlit's name for it
    script.start()
    warm = threading.Thread(target=nav.warm_up)
    warm.start()
    time.sleep(0.3)
    assert warm.is_alive() and not done
    release.set()
    script.join()
    warm.join(timeout=30)
    assert not warm.is_alive() and done == ["check", "freeze"]


def test_dashboard_serve_starts_streamlit_and_warms_up_at_start(tmp_path):
    """`python -m dashboard.serve` (what scripts/dashboard.sh runs) serves app.py and says when the
    pages' imports are done, before any browser has connected."""
    import os
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dashboard.serve", "--server.port", str(port),
                                 "--server.headless", "true"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, ABEBOT_RUNS_DIR=str(tmp_path / "runs")), start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while "warm-up finished" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert "warm-up finished" in log.read_text(), log.read_text()
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read() == b"ok"
        assert "No runtime found" not in log.read_text()
        # the front end served with Plotly imported early on chart pages (dashboard.static_preload):
        # plotly.js's basic bundle where npm installed it, else Streamlit's own chunk
        from dashboard.static_preload import BASIC_BUNDLE, usable_bundle

        token = (tmp_path / "runs" / ".secrets" / "dashboard-token").read_text().strip()  # dashboard.guard
        assert f"/?token={token}" in log.read_text()  # the start command prints the URL carrying it
        asked = urllib.request.Request(f"http://127.0.0.1:{port}/monitor", headers={"Authorization": f"token {token}"})
        page = urllib.request.urlopen(asked, timeout=5).read().decode()
        pattern = (r"static/abebot/plotly-basic\.[0-9a-f]{16}\.js" if usable_bundle(BASIC_BUNDLE)
                   else r"static/js/PlotlyChart\.[\w-]+\.js")
        module = re.search(r'import\("\./(' + pattern + r')"\)', page).group(1)
        asked = urllib.request.Request(f"http://127.0.0.1:{port}/{module}", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(asked, timeout=5) as r:  # as it is, like Streamlit's bundles: not gzipped afresh
            assert r.status == 200 and "javascript" in r.headers["Content-Type"] and not r.headers["Content-Encoding"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_individuals_survive_a_filter_that_leaves_fewer_rows_than_the_selected_one(populated):
    at = app("individuals")
    tenth = {"selection": {"rows": [10], "columns": [], "cells": []}}
    at.session_state["ind_table"] = tenth
    at.run()
    assert not at.exception and any(s.value.startswith("Kernel of ") for s in at.subheader)
    prefix = at.dataframe(key="ind_table").value["genome_hash"].iloc[0][:4]
    for value in (prefix, "zzzz"):  # a few rows, then a prefix that matches nothing
        at.session_state["ind_table"] = tenth
        at.text_input(key="ind_hash").set_value(value).run()
        assert not at.exception, [e.value for e in at.exception]
        assert len(at.dataframe(key="ind_table").value) < 10
        at.session_state["ind_table"] = tenth  # the same filter again, the stale selection still there
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert not any(s.value.startswith("Kernel of ") for s in at.subheader)
    assert "0 of 48 individuals match" in texts(at)


@pytest.mark.parametrize("content, why", [(b"", "mine.c is empty"), (b"\x7fELF\x02\x00\x00", "mine.c is a binary file"),
                                          (b"void abebot_gemm( {\n", "compile_error")])
def test_check_page_names_the_users_file_for_an_odd_upload(runs, content, why):
    at = app("check")
    at.file_uploader(key="check_file").upload("mine.c", content, "text/x-c").run()
    at.text_input(key="check_problem").input('{"m": 64, "n": 64, "k": 64}').run()
    at.button(key="check_run").click().run(timeout=120)
    shown = "\n".join(e.value for e in at.error) + "\n".join(c.value for c in at.code)
    assert why in shown, shown
    assert "--kernel" not in shown and ".check" not in shown and "upload-" not in shown and ".cache" not in shown, shown
    if why == "compile_error":
        assert "mine.c:1:" in shown and not at.dataframe  # no baselines were timed, no empty tables
    assert not (runs / ".check").exists() or not list((runs / ".check").iterdir())  # nothing left behind


def test_check_page_placeholders_follow_the_chosen_workload(runs):
    at = app("check")
    assert '"m"' in at.text_input(key="check_problem").placeholder
    at.selectbox(key="check_workload").set_value("rmsnorm").run()
    hint = json.loads(at.text_input(key="check_problem").placeholder)
    assert set(hint) == {"rows", "cols"}
    assert "argtypes" not in at.text_input(key="check_launch").placeholder


def test_a_population_that_is_not_a_number_blocks_start_and_says_why(runs):
    at = app()
    assert not at.button(key="launch_start").disabled
    at.number_input(key="launch_population").set_value(None).run()  # what "abc" leaves in a number field
    assert at.button(key="launch_start").disabled
    assert any("Population must be a number" in e.value for e in at.error), [e.value for e in at.error]
    assert not run_folders(runs)
    at.number_input(key="launch_population").set_value(6).run()
    assert not at.button(key="launch_start").disabled and not at.error


def test_a_finished_run_launched_here_no_longer_waits_for_a_heartbeat(populated, monkeypatch):
    runs, run_id = populated
    lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # the worker, still exiting
    try:
        monkeypatch.setitem(L._launched, run_id, L.Launched(run_id, "c", 0, lingering, 0.0))
        at = app("monitor", {"run": run_id})
        assert "finished" in metric(at, "Status")
        assert not any("waiting for its first heartbeat" in i.value for i in at.info)
    finally:
        lingering.kill()
        lingering.wait()


def test_the_sidebar_caption_reads_the_runs_heartbeat_not_the_page_load(runs, live_run):
    from dashboard import ui
    from dashboard.runs import all_runs, run_label

    row = next(r for r in all_runs(runs) if r["run_id"] == live_run)
    stale = {**row, "status": "starting", "generation": None}  # what the tab saw when it launched the run
    hb = read_json(runs / live_run / "heartbeat.json")
    atomic_write_json(runs / live_run / "heartbeat.json", {**hb, "status": "paused", "generation": 1})
    label = run_label(ui.fresh_row(stale))
    assert "paused" in label and "2 of 3 generations done" in label, label


def test_a_machine_load_of_ten_or_more_is_shown_without_a_decimal(monkeypatch):
    """The browser test saw "18.6 / 2 cores" cut short on a loaded machine."""
    from dashboard import live

    monkeypatch.setattr(live.os, "getloadavg", lambda: (18.6, 0.0, 0.0))
    monkeypatch.setattr(live.os, "cpu_count", lambda: 2)
    assert live.machine_load()["value"] == "19 / 2 cores"
    monkeypatch.setattr(live.os, "getloadavg", lambda: (2.34, 0.0, 0.0))
    assert live.machine_load()["value"] == "2.3 / 2 cores"
