"""Runs page: every run with its settings; name, notes, launch again, archive, delete; compare runs."""
from __future__ import annotations

import streamlit as st

from dashboard import archive as A
from dashboard import charts, data, manage, plotly_basic, ui
from dashboard import launch as L
from dashboard.launch import relaunch_state
from dashboard.meta import load_meta, save_meta
from dashboard.names import md, titled
from dashboard.runs import all_runs, load_json, resolve
from dashboard.settings import runs_dir
from store.reader import LiveDamaged
from store.runs import champion_figure, speedup_text

ui.ensure_navigation()

st.title("Runs")
runs = runs_dir()
rows = all_runs(runs)
flash = st.session_state.pop("runs_flash", None)  # what the last archive / restore did, said once
if flash:
    st.success(flash, icon=":material/inventory_2:")


def archived_runs() -> None:
    """The archived runs (``<runs>/.archive``), each with a button that moves it back."""
    shelved = A.archived(runs)
    with st.expander(f"Archived runs ({len(shelved)})", expanded=False):
        if not shelved:
            st.caption("None. Archiving a run (below, under a run) moves it to `.archive/` in the runs folder: "
                       "out of every list, its files kept.")
        for r in shelved:
            c1, c2 = st.columns([4, 1], vertical_alignment="center")
            c1.markdown(f"{md(titled(r['run_id'], runs / '.archive' / r['run_id']))} · "
                        f"{md(r.get('workload') or '?')}/{md(r.get('backend') or '?')}")
            if c2.button("Restore", icon=":material/unarchive:", key=f"restore_{r['run_id']}"):
                try:
                    A.restore(runs, r["run_id"])
                except (ValueError, OSError) as exc:
                    st.error(str(exc))
                else:
                    st.session_state["runs_flash"] = f"Run {r['run_id']} restored from the archive."
                    st.rerun()


if not rows:
    ui.no_runs_message()
    archived_runs()
    st.stop()
df = manage.table(rows)
f1, f2 = st.columns(2)
workloads = f1.multiselect("Workload", sorted(df["workload"].dropna().unique()), key="runs_workload",
                           placeholder="all workloads")
backends = f2.multiselect("Backend", sorted(df["backend"].dropna().unique()), key="runs_backend",
                          placeholder="all backends")
keep = df["workload"].isin(workloads or df["workload"]) & df["backend"].isin(backends or df["backend"])
shown = df[keep]
for col in ("created_at", "updated_at"):
    shown = shown.assign(**{col: data.to_datetime(shown[col])})
st.dataframe(shown, hide_index=True, width="stretch", key="runs_table", column_config={
    "best_fitness": st.column_config.NumberColumn(
        "champion fitness", format="%.4f", help="the latest generation's champion, scored from the median of its "
        "re-measurements: the figure core runs, Monitor, Export and the heartbeat show"),
    "champion": st.column_config.TextColumn("speed-up (pairs)", help="the champion over the primary baseline, "
                                            "timed in interleaved pairs; NOISY: the pair ratios spread over 10%"),
    "done": st.column_config.TextColumn("generations done", help="generations are numbered from 0: 5 done = 0..4"),
    "created_at": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
    "updated_at": st.column_config.DatetimeColumn("updated (UTC)", format="YYYY-MM-DD HH:mm:ss"),
})
ids = list(shown["run_id"]) or [r["run_id"] for r in rows]
titles = {r["run_id"]: titled(r["run_id"], r.get("path")) for r in rows}  # a name beside its id
archived_runs()

st.subheader("One run")
run_id = st.selectbox("Run", ids, key="runs_pick", format_func=titles.get)
folder = resolve(runs, run_id, [r["run_id"] for r in rows])
a1, a2, a3, a4 = st.columns(4)
for col, (page, label, icon) in zip((a1, a2, a3), (("monitor", "Monitor", ":material/monitoring:"),
                                                   ("individuals", "Individuals", ":material/table_view:"),
                                                   ("genomes", "Genomes", ":material/genetics:"))):
    if col.button(f"Open in {label}", icon=icon, key=f"open_{page}", width="stretch"):
        st.session_state["current_run"] = run_id
        st.switch_page(f"pages/{page}.py", query_params={"run": run_id})  # same tab, same session
if a4.button("Launch again with these settings", icon=":material/replay:", key="relaunch", width="stretch"):
    st.session_state["relaunch_form"] = relaunch_state(load_json(folder / "config.json") or {})
    st.switch_page("pages/launch.py")
meta = load_meta(folder)
with st.form("meta_form", border=True):
    name = st.text_input("Name", value=meta["name"], max_chars=80, key=f"meta_name_{run_id}")
    notes = st.text_area("Notes", value=meta["notes"], max_chars=4000, key=f"meta_notes_{run_id}")
    if st.form_submit_button("Save name and notes"):
        save_meta(folder, name, notes)
        st.rerun()
with st.expander("Archive or delete"):
    item = L.launched(run_id)
    reason = manage.live_reason(runs, run_id, bool(item and item.alive()))
    if reason:
        st.info(reason)
    sure = st.checkbox(f"Yes, I mean run {run_id}", key=f"confirm_{run_id}", disabled=bool(reason))
    b1, b2 = st.columns(2)
    if b1.button("Archive (move to .archive/)", key="archive_run", disabled=bool(reason) or not sure):
        manage.archive(runs, run_id)
        st.session_state.pop("runs_pick", None)
        st.session_state["runs_flash"] = (f"Run {md(titles[run_id])} archived: moved to `.archive/`. "
                                          "Restore it under “Archived runs”.")
        st.rerun()
    if b2.button("Delete for good", key="delete_run", type="primary", disabled=bool(reason) or not sure):
        manage.delete(runs, run_id)
        st.session_state.pop("runs_pick", None)
        st.rerun()

st.subheader("Compare runs")
chosen = st.multiselect("Runs to compare", ids, default=ids[:min(3, len(ids))], key="compare_runs",
                        format_func=titles.get)
curves = {}
for rid in chosen:
    path = resolve(runs, rid, ids)
    if path is None:
        continue
    try:
        gens = ui.generations(str(path), ui.signature(path))
    except LiveDamaged as exc:
        st.caption(str(exc))
        continue
    if not gens.empty:
        curves[rid] = data.fitness_curves(gens)
# Each legend entry carries its run's champion figure: the paired speed-up, NOISY when marked (issue 27).
legend = {rid: f"{titles.get(rid, rid)} · {speedup_text(champion_figure(resolve(runs, rid, ids)))}".rstrip(" ·")
          for rid in curves}
plotly_basic.chart(st, charts.compare_runs(curves, legend), "compare_chart")
st.caption("Fitness is a weighted sum of ratios against each run's own baseline (baseline time / time, baseline "
           "memory / memory, stability), so a curve says how far a run got past **its** baseline. Runs whose "
           "baselines differ (another device, problem size or weights) are not comparable by height.")
if len(chosen) == 2:
    cfg_a, cfg_b = (load_json(resolve(runs, r, ids) / "config.json") or {} for r in chosen)
    diff = manage.config_diff(cfg_a, cfg_b)
    st.markdown(f"**Configuration diff** — A `{chosen[0]}`, B `{chosen[1]}`: {int(diff['differs'].sum())} settings differ")
    st.dataframe(diff, hide_index=True, width="stretch", key="config_diff")
