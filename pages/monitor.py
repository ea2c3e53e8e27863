"""Monitor page: one run, live. Only the fragment below refreshes; the rest of the page stays put."""
from __future__ import annotations

import streamlit as st

from dashboard import data, live, plotly_basic, ui
from dashboard import launch as L
from dashboard.names import md, run_name
from dashboard.settings import LIVE_STATUSES, refresh_seconds, runs_dir
from store.control import read_control, write_control
from store.reader import LiveDamaged, RunReader
from store.runs import champion_figure, speedup_text
from store.schema import StoreError

ui.ensure_navigation()

run_id, folder = ui.run_page("Monitor", heading=False)
reader = RunReader(folder)
try:
    cfg = reader.config()
except StoreError as exc:
    st.error(str(exc))
    st.stop()
name = run_name(folder)
st.title(md(name) if name else run_id)
st.caption((f"{md(run_id)} · " if name else "") + live.config_caption(cfg))


def is_live(status: str) -> bool:
    """Refresh while the run is running/paused/starting, or while a worker this dashboard just
    started for it is alive but has not written its first heartbeat yet."""
    item = L.launched(run_id)
    return status in LIVE_STATUSES or bool(item and item.alive() and status in ("dead", "stopped", "failed"))


live_now = is_live(reader.status())


def controls(status: str) -> None:
    """Pause / resume / stop (written to control.json; the worker obeys between generations)."""
    pending = read_control(folder)
    c1, c2, c3, c4 = st.columns([1, 1, 1, 4])
    if c1.button("Pause", icon=":material/pause:", disabled=status != "running", key="ctl_pause", width="stretch"):
        write_control(folder, "pause")
        pending = "pause"
    if c2.button("Resume", icon=":material/play_arrow:", disabled=status != "paused", key="ctl_resume",
                 width="stretch"):
        write_control(folder, "resume")
        pending = "resume"
    if c3.button("Stop", icon=":material/stop:", disabled=status not in ("running", "paused"), key="ctl_stop",
                 width="stretch"):
        write_control(folder, "stop")
        pending = "stop"
    message = live.control_message(pending, status)
    if message:
        c4.info(message)


def dead_run(status: str) -> None:
    """A run that is no longer running: say why, show the log, offer to resume."""
    lines = reader.log_tail(40)
    if status == "dead":
        st.error("The worker stopped sending heartbeats and its process is gone: this run is **dead**.",
                 icon=":material/heart_broken:")
    elif status == "failed":
        st.error("The worker reported a failure.", icon=":material/error:")
    else:
        st.info("This run was stopped. It can be resumed from its last committed generation.",
                icon=":material/stop_circle:")
    with st.expander("Last lines of worker.log", expanded=status != "stopped"):
        st.code("\n".join(lines) or "(empty log)", language="text", wrap_lines=True)
        errors = L.stderr_tail(runs_dir(), run_id)
        if errors:
            st.markdown("The worker's stderr:")
            st.code("\n".join(errors), language="text", wrap_lines=True)
    if st.button("Resume run", icon=":material/replay:", type="primary", key="resume_run"):
        reason = L.busy_reason(runs_dir(), str(cfg.get("backend")), int(cfg.get("device", 0)))
        if reason:
            st.warning(reason)
        else:
            L.resume_run(runs_dir(), run_id)
            st.toast(f"Resuming {run_id}…")
            st.rerun()


def headline(status: str, prog: dict, best, noise: dict | None) -> None:
    """The headline metrics, four to a row so none is cut off at 1280 px."""
    top, bottom = st.columns(4), st.columns(4)
    top[0].metric("Status", status)
    top[1].metric("Generations done", f"{prog['done']} / {prog['target']}" if prog["target"] else f"{prog['done']}",
                  help="Generations are numbered from 0: the last of 5 done is generation 4.")
    fig = champion_figure(folder)
    top[2].metric("Champion fitness", f"{best:.4f}" if best is not None else "—",
                  delta=speedup_text(fig) or None, delta_color="off",
                  help="The champion as every view shows it (Runs, core runs, Export, the heartbeat): the latest "
                       "generation's best, scored from the median of its re-measurements; in brackets its speed-up "
                       "over the primary baseline, timed in interleaved pairs, with its spread, the number of timings "
                       "and the cache policy. NOISY: its pair ratios spread over 10%.")
    top[3].metric("Evaluations / s", f"{prog['evals_per_s']:.2f}" if prog["evals_per_s"] is not None else "—")
    bottom[0].metric("Elapsed", data.duration(prog["elapsed_s"]))
    bottom[1].metric("ETA", data.duration(prog["eta_s"]) if status in LIVE_STATUSES else "—")
    bottom[2].metric("Baseline noise", f"±{100 * noise['rel_spread']:.1f} %" if noise and noise["rel_spread"] is not None else "—",
                     delta=f"{noise['noisy']} of {noise['measured']} generations noisy" if noise else None,
                     delta_color="inverse" if noise and noise["noisy"] else "off",
                     help="The baseline is timed several times in every generation, between the candidates: its "
                          "spread (drift between those timings or jitter within one, over its median) in the last "
                          "generation. A generation whose spread exceeds 5 % is noisy: its speed ratios are not to be trusted.")
    load = live.machine_load()
    bottom[3].metric("Machine load", load["value"], help=load["help"])


def body() -> None:
    """The live part: status, progress, controls and every chart."""
    status = reader.status()
    if is_live(status) != live_now:
        st.rerun(scope="app")  # switch refreshing on or off
    sig = ui.signature(folder)
    gens = ui.generations(str(folder), sig)
    hb = reader.heartbeat()
    prog = data.progress(cfg, gens, hb)
    best = gens["best_fitness"].iloc[-1] if not gens.empty else None  # the champion's figure, as re-timed
    noise = data.noise_summary(gens)
    headline(status, prog, best, noise)
    phase = (hb or {}).get("phase") if status in LIVE_STATUSES else ""
    st.progress(prog["fraction"], text=prog["label"] + (f" · {phase}" if phase else ""))
    if status in LIVE_STATUSES:
        controls(status)
    elif hb is None and L.launched(run_id) and L.launched(run_id).alive():  # once it has written one, never again
        st.info("Worker started: waiting for its first heartbeat…", icon=":material/hourglass_top:")
    elif status in ("dead", "failed", "stopped"):
        dead_run(status)
    if status in LIVE_STATUSES:
        with st.expander("Live log (last 15 lines of worker.log)", expanded=False):
            st.code("\n".join(reader.log_tail(15)) or "(empty log)", language="text", wrap_lines=True)
    if not gens.empty:
        last = gens.iloc[-1]
        st.caption(f"Champion `{last.get('champion_hash', '?')}` · best time so far "
                   f"{data.fmt_time_us(gens['best_time_us'].min())} · least memory so far "
                   f"{data.fmt_bytes(gens['best_memory_bytes'].min())} · generation {int(last['generation'])}: "
                   f"{int(last.get('n_evaluated', 0) or 0)} new candidates evaluated,"
                   f" {int(last.get('n_lethal', 0) or 0)} lethal" + data.timing_caption(last, noise))
    if cfg.get("devices") or cfg.get("cluster"):
        live.devices_panel(folder, gens)
    wall = st.session_state.get("x_wall", False)
    changes = data.champion_changes(gens)
    figures = live.run_charts_json(str(folder), sig, wall)
    for pair in (("chart_fitness", "chart_time_memory"), ("chart_lethal", "chart_diversity")):
        for column, key in zip(st.columns(2), pair):
            plotly_basic.chart(column, figures[key], key)
    if gens.empty:
        return
    latest = int(gens["generation"].max())
    c1, c2 = st.columns([1, 3])
    follow = c1.toggle("Follow the latest generation", value=True, key="pareto_follow")
    gen = latest if follow else int(c2.number_input("Generation", min_value=0, max_value=latest, value=latest,
                                                     key="pareto_gen"))
    badge = live.noisy_badge(gens, gen)
    if badge:
        st.badge(badge, icon=":material/warning:", color="orange")
    plotly_basic.chart(st, live.pareto_json(str(folder), gen, sig if gen == latest else ()), "chart_pareto")
    live.champion_timeline(run_id, changes)


st.toggle("Wall-clock time on the x-axis", key="x_wall",
          help="Plot against the time each generation was committed instead of its number.")
def live_body() -> None:
    """:func:`body`, or the one line a damaged live/ file gives (a fragment rerun skips app.py's catch)."""
    try:
        body()
    except LiveDamaged as exc:
        st.info(str(exc), icon=":material/build:")


st.fragment(live_body, run_every=refresh_seconds() if live_now else None)()
