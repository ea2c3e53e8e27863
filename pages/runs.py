"""Runs page: every run with its settings; name, notes, launch again, archive, delete; compare runs."""
from __future__ import annotations

import streamlit as st

from dashboard import charts, data, manage, plotly_basic, ui
from dashboard import launch as L
from dashboard.launch import relaunch_state
from dashboard.meta import load_meta, save_meta
from dashboard.runs import all_runs, load_json, resolve
from dashboard.settings import runs_dir
from store.reader import LiveDamaged

ui.ensure_navigation()

st.title("Runs")
runs = runs_dir()
rows = all_runs(runs)
if not rows:
    ui.no_runs_message()
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
    "best_fitness": st.column_config.NumberColumn("best fitness", format="%.4f"),
    "done": st.column_config.TextColumn("generations done", help="generations are numbered from 0: 5 done = 0..4"),
    "created_at": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
    "updated_at": st.column_config.DatetimeColumn("updated (UTC)", format="YYYY-MM-DD HH:mm:ss"),
})
ids = list(shown["run_id"]) or [r["run_id"] for r in rows]

st.subheader("One run")
run_id = st.selectbox("Run", ids, key="runs_pick")
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
        st.rerun()
    if b2.button("Delete for good", key="delete_run", type="primary", disabled=bool(reason) or not sure):
        manage.delete(runs, run_id)
        st.session_state.pop("runs_pick", None)
        st.rerun()

st.subheader("Compare runs")
chosen = st.multiselect("Runs to compare", ids, default=ids[:min(3, len(ids))], key="compare_runs")
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
plotly_basic.chart(st, charts.compare_runs(curves), "compare_chart")
st.caption("Fitness is a weighted sum of ratios against each run's own baseline (baseline time / time, baseline "
           "memory / memory, stability), so a curve says how far a run got past **its** baseline. Runs whose "
           "baselines differ (another device, problem size or weights) are not comparable by height.")
if len(chosen) == 2:
    cfg_a, cfg_b = (load_json(resolve(runs, r, ids) / "config.json") or {} for r in chosen)
    diff = manage.config_diff(cfg_a, cfg_b)
    st.markdown(f"**Configuration diff** — A `{chosen[0]}`, B `{chosen[1]}`: {int(diff['differs'].sum())} settings differ")
    st.dataframe(diff, hide_index=True, width="stretch", key="config_diff")
