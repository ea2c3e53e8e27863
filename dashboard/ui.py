"""Streamlit-side helpers shared by the pages: the run selector and cached readers."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import data
from dashboard.nav import ensure_navigation  # noqa: F401  (pages call ui.ensure_navigation())
from dashboard.names import md, run_name
from dashboard.runs import all_runs, data_signature, resolve, run_label
from dashboard.settings import LIVE_STATUSES, refresh_seconds, runs_dir
from store.reader import RunReader, live_problem

# Material icons (Streamlit's own font), not emoji: emoji are empty boxes on a minimal Debian.
STATUS_ICON = {"running": ":material/play_circle:", "paused": ":material/pause_circle:",
               "finished": ":material/check_circle:", "stopped": ":material/stop_circle:",
               "failed": ":material/error:", "dead": ":material/heart_broken:", "starting": ":material/hourglass_top:"}


def pick_run(label: str = "Run") -> tuple[str, Path] | None:
    """Sidebar selector over :func:`store.runs.list_runs`; keeps ``?run=`` in the URL in step.

    A run id from the URL is used only if it is a listed run that :func:`store.runs.run_dir`
    resolves inside the runs folder; anything else is ignored with a warning.
    """
    runs = runs_dir()
    rows = all_runs(runs)
    ids = [r["run_id"] for r in rows]
    if not ids:
        return None
    by_id = {r["run_id"]: r for r in rows}
    wanted = st.query_params.get("run")
    if wanted and resolve(runs, wanted, ids) is None:
        st.sidebar.warning("The run in the address is not a run of this runs folder; showing another.")
        wanted = None
    if wanted and st.session_state.get("_run_from_url") != wanted:  # a new address (a link, another page): it wins
        st.session_state["current_run"] = wanted
    current = st.session_state.get("current_run")
    # The picker's state is set from ``current_run`` on every run: a page switch gives the picker a new
    # widget identity, and its old state would otherwise be dropped for the newest run (Monitor's
    # "Open the diff in Genomes" opened the newest run). A pick in the picker updates current_run first.
    st.session_state["run_select"] = current if current in ids else ids[0]
    names = {r["run_id"]: run_name(r.get("path")) for r in rows}
    run_id = st.sidebar.selectbox(label, ids, key="run_select", on_change=_picked,
                                  format_func=lambda rid: f"{names[rid]} · {rid}" if names.get(rid) else rid)
    live = by_id[run_id].get("status") in LIVE_STATUSES
    with st.sidebar:  # refreshed on its own while the run is live: Monitor reruns only its body
        st.fragment(run_caption, run_every=refresh_seconds() if live else None)(by_id[run_id])
    st.session_state["current_run"] = run_id
    if st.query_params.get("run") != run_id:
        st.query_params["run"] = run_id
    st.session_state["_run_from_url"] = run_id
    return run_id, resolve(runs, run_id, ids)  # type: ignore[return-value]


def _picked() -> None:
    """The run picker's callback: the run picked becomes the current run (before the page runs)."""
    st.session_state["current_run"] = st.session_state.get("run_select")


def run_caption(row: dict) -> None:
    """The sidebar's line under the run picker (:func:`dashboard.runs.run_label`), with the status and
    generations read again from the run's heartbeat: a tab that launched a run does not keep saying
    "starting · 0 of 6" once the run is paused at 3 of 6."""
    st.caption(md(row["run_id"]) + "  \n" + md(run_label(fresh_row(row))))


def fresh_row(row: dict) -> dict:
    """``row`` (from :func:`dashboard.runs.all_runs`) with status, generation and total generations
    as the run's heartbeat says now."""
    from store.runs import HEARTBEAT, effective_status, read_json

    folder = row.get("path")
    if not folder:
        return row
    hb = read_json(Path(folder) / HEARTBEAT)
    hb = hb if isinstance(hb, dict) else None
    if hb is None:
        return row
    return {**row, "status": effective_status(folder, hb), "generation": hb.get("generation"),
            "total_generations": hb.get("total_generations", row.get("total_generations"))}


def run_page(title: str, heading: bool = True) -> tuple[str, Path]:
    """The chosen run of a per-run page; with none, show ``title`` and the empty-folder message and stop.

    ``heading=False`` leaves the heading of a chosen run to the page (Monitor titles it by run id).
    """
    picked = pick_run()
    if picked is None or heading:
        st.title(title)
    if picked is None:
        no_runs_message()
        st.stop()
    problem = live_problem(picked[1])
    if problem:  # a damaged live/ file: one line until the worker, a resume or `repair` rewrites it
        st.info(problem, icon=":material/build:")
        st.stop()
    return picked


def no_runs_message() -> None:
    """What a page shows when the runs folder is empty."""
    st.info(f"No runs yet in `{runs_dir()}`. Start one on the **Launch** page.")
    st.page_link("pages/launch.py", label="Go to Launch", icon=":material/rocket_launch:")


@st.cache_data(max_entries=16, show_spinner=False)
def generations(folder: str, signature: tuple) -> pd.DataFrame:
    """Per-generation summaries (cached until the run writes something new)."""
    return RunReader(folder).generations()


@st.cache_data(max_entries=16, show_spinner=False)
def lethal_causes(folder: str, signature: tuple) -> pd.DataFrame:
    """:func:`dashboard.data.lethal_causes` of the run (a JSON parse per generation: 50 ms for 5,000,
    so cached like the generations; a new tab or a refresh with nothing new skips it)."""
    return data.lethal_causes(generations(folder, signature))


@st.cache_data(max_entries=64, show_spinner=False)
def individuals(folder: str, generation: int | None, signature: tuple) -> pd.DataFrame:
    """Individuals of one generation (or all when None), cached until the run writes something new."""
    return RunReader(folder).individuals(generation)


HISTORY_COLS = ["generation", "genome_hash", "parents", "origin", "fitness", "status", "source_hash"]


@st.cache_data(max_entries=4, show_spinner=False)
def history(folder: str, signature: tuple) -> pd.DataFrame:
    """Every individual of the run, with only the columns lineage needs (cheap for 5,000 generations)."""
    return RunReader(folder).individuals(None, columns=HISTORY_COLS)


@st.cache_data(max_entries=256, show_spinner=False)
def kernel(folder: str, source_hash: str) -> dict | None:
    """A kernel row by source hash (immutable once written, so cached without a signature)."""
    return RunReader(folder).kernel(source_hash)


def signature(folder: Path) -> tuple:
    """The cache token of a run folder (see :func:`dashboard.runs.data_signature`)."""
    return data_signature(folder)


def status_badge(status: str) -> str:
    """``running`` -> ``:material/play_circle: running`` (for markdown, captions and badges)."""
    return f"{STATUS_ICON.get(status, ':material/circle:')} {status}"
