"""Pieces of the Monitor page: the configuration caption, control feedback, the machine's load,
its four run charts, the noisy badge and the champion timeline."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import plotly.io as pio
import streamlit as st

from dashboard import charts, data, ui
from dashboard.meta import load_meta
from dashboard.names import md
from dashboard.settings import LIVE_STATUSES


def config_caption(cfg: dict, folder: Path | None = None) -> str:
    """One readable line for a run configuration (never a Python dict repr)."""
    name = md(load_meta(folder)["name"]) if folder else ""  # the user's text, shown as typed (never Markdown)
    return (f"{name + ' · ' if name else ''}{cfg.get('workload', '?')} on {cfg.get('backend', '?')}:"
            f"{cfg.get('device', 0)} · population {cfg.get('population', '?')} · selection "
            f"{cfg.get('selection', '?')} · weights {data.fmt_weights(cfg)} · problem "
            f"{data.fmt_problem(cfg.get('problem'))}")


def control_message(pending: str | None, status: str) -> str | None:
    """What a requested pause / resume / stop is waiting for, or None once the run obeys it.

    A running worker reads control.json between generations; a paused one polls it every half
    second, so resume and stop act at once while paused.
    """
    expected = {"pause": "paused", "resume": "running", "stop": "stopped"}
    if not pending or status not in LIVE_STATUSES or expected.get(pending) == status:
        return None
    if status == "paused":
        return f"**{pending}** requested — the paused worker picks it up within a second or two."
    return f"**{pending}** requested — the worker obeys at the end of the current generation."


def machine_load() -> dict:
    """This machine's 1-minute load average against its CPU count (the dashboard runs beside the
    worker; another machine's load is not visible from here)."""
    try:
        one, _, _ = os.getloadavg()
    except OSError:
        return {"value": "—", "help": "load average not available on this system"}
    cores = os.cpu_count() or 1
    # No decimal from 10 up: "18.6 / 2 cores" was cut short in Monitor's narrow metric column.
    return {"value": f"{one:.1f} / {cores} cores" if one < 10 else f"{one:.0f} / {cores} cores",
            "help": "1-minute load average of the machine this dashboard runs on, against its CPU cores. "
                    "Above the core count, timings are disturbed by other work."}


def run_charts(gens: pd.DataFrame, causes: pd.DataFrame, wall: bool, changes: pd.DataFrame) -> dict:
    """The Monitor page's four charts of a whole run, by their element keys: fitness (with the
    champion ``changes`` marked), best time and memory so far, lethal ``causes``, diversity."""
    return {"chart_fitness": charts.fitness(data.fitness_curves(gens), wall, changes),
            "chart_time_memory": charts.time_and_memory(data.best_so_far(gens), data.baseline_noise(gens), wall),
            "chart_lethal": charts.lethal(causes),
            "chart_diversity": charts.diversity(data.series(gens, ["diversity", "finished_at"], "mean"), wall)}


@st.cache_data(max_entries=16, show_spinner=False)
def run_charts_json(folder: str, signature: tuple, wall: bool) -> dict[str, str]:
    """:func:`run_charts` of the run in ``folder`` as Plotly JSON, cached like its generations: a new
    tab, a reload or a refresh with nothing new sends them without building them again (0.12 s of
    the server for 5,000 generations, 0.27 s when the browser shares its two cores)."""
    gens = ui.generations(folder, signature)
    figures = run_charts(gens, ui.lethal_causes(folder, signature), wall, data.champion_changes(gens))
    return {key: pio.to_json(fig, validate=False) for key, fig in figures.items()}


@st.cache_data(max_entries=64, show_spinner=False)
def pareto_json(folder: str, generation: int, signature: tuple) -> str:
    """The Pareto scatter of one generation as Plotly JSON, cached like its individuals."""
    points = data.pareto_points(ui.individuals(folder, generation, signature))
    return pio.to_json(charts.pareto(points, generation), validate=False)


def noisy_badge(gens: pd.DataFrame, generation: int) -> str | None:
    """Badge text for a generation flagged noisy (its baseline spread too wide), else None."""
    if "noisy" not in gens.columns:
        return None
    row = gens[gens["generation"] == generation]
    if row.empty or not bool(row["noisy"].fillna(False).iloc[0]):
        return None
    rel = pd.to_numeric(row.get("baseline_rel_spread"), errors="coerce").iloc[0]
    spread = f" (baseline spread ±{100 * rel:.1f} %)" if rel == rel else ""
    return f"Generation {generation} is noisy{spread}: its speed ratios are not to be trusted"


def champion_timeline(run_id: str, changes: pd.DataFrame) -> None:
    """Every change of champion (marked on the fitness chart), a button to open one change's genome
    diff, and the newest :data:`~dashboard.charts.CHANGE_MARKERS` as a table, drawn only once asked
    for: the table element is the heaviest script a new Monitor tab would otherwise load
    (benchmarks/MONITOR_RESULTS.md)."""
    st.subheader("Champion changes")
    if changes.empty:
        st.caption("No champion yet.")
        return
    shown = changes.iloc[::-1].head(charts.CHANGE_MARKERS).copy()
    with_parent = shown[shown["previous_hash"].notna()]
    st.caption(f"{len(changes):,} change{'s' * (len(changes) != 1)} of champion, the newest "
               f"{min(len(changes), charts.CHANGE_MARKERS)} marked on the fitness chart.")
    if not with_parent.empty:
        c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
        labels = {int(g): f"generation {g}: {a} → {b}" for g, a, b in
                  zip(with_parent["generation"], with_parent["previous_hash"], with_parent["champion_hash"])}
        gen = c1.selectbox("Change", list(labels), key="timeline_pick", format_func=labels.get)
        row = with_parent[with_parent["generation"] == gen].iloc[0]
        if c2.button("Open the diff in Genomes", icon=":material/difference:", key="timeline_open"):
            st.switch_page("pages/genomes.py", query_params={"run": run_id, "a": row["previous_hash"],
                                                             "b": row["champion_hash"]})
    # A toggle with a fixed label, not an expander: a live run changes what a label would count, and a
    # widget whose label changes starts again closed.
    if st.toggle("Show them as a table", key="timeline_table",
                 help=f"The newest {charts.CHANGE_MARKERS} changes of champion, newest first"):
        shown["committed"] = data.to_datetime(shown["finished_at"])
        st.dataframe(shown[["generation", "committed", "champion_hash", "previous_hash", "best_fitness"]],
                     hide_index=True, width="stretch", key="champion_changes", height=min(38 + 35 * len(shown), 300),
                     column_config={"best_fitness": st.column_config.NumberColumn("best fitness", format="%.4f"),
                                    "committed": st.column_config.DatetimeColumn("committed (UTC)",
                                                                                 format="YYYY-MM-DD HH:mm:ss")})


def devices_panel(folder: Path, gens: pd.DataFrame) -> None:
    """Each device's share of the evaluations, its latest baseline and its health (a run on several
    devices or a Dask cluster)."""
    import json

    from store.queries import device_summary

    table = device_summary(folder)
    if len(table) < 2:
        return
    latest: dict = {}
    if "baseline_devices" in gens and gens["baseline_devices"].notna().any():
        latest = json.loads(gens["baseline_devices"].dropna().iloc[-1])
    table["latest baseline"] = table["device"].map(lambda d: data.fmt_time_us(latest.get(d)))
    table["share"] = table["share"].map(lambda s: f"{100 * s:.0f} %")
    table["health"] = table["crashed_or_timeout"].map(lambda n: "ok" if n == 0 else f"{n} crashed or timed out")
    st.markdown("**Devices**: each device's share of the new evaluations, its baseline in the latest generation "
                "(a candidate's time term uses its own device's baseline), and its health")
    st.dataframe(table.drop(columns=["crashed_or_timeout"]), hide_index=True, width="stretch")
