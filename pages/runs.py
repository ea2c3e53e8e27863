"""Runs page: every run with its status and best fitness; compare the fitness curves of several."""
from __future__ import annotations

import streamlit as st

from dashboard import charts, data, ui
from dashboard.runs import all_runs, resolve, runs_table
from dashboard.settings import runs_dir

ui.ensure_navigation()

st.title("🗂️ Runs")
runs = runs_dir()
rows = all_runs(runs)
if not rows:
    ui.no_runs_message()
    st.stop()
df = runs_table(rows)
df.insert(0, "open", [f"monitor?run={r}" for r in df["run_id"]])
df["status"] = [ui.status_badge(s) for s in df["status"]]
for col in ("created_at", "updated_at"):
    df[col] = data.to_datetime(df[col])
st.dataframe(df, hide_index=True, width="stretch", key="runs_table", column_config={
    "open": st.column_config.LinkColumn("open", display_text="Monitor ↗", width="small"),
    "best_fitness": st.column_config.NumberColumn("best fitness", format="%.4f"),
    "generation": st.column_config.NumberColumn("last generation", help="index of the last committed generation"),
    "created_at": st.column_config.DatetimeColumn("created (UTC)", format="YYYY-MM-DD HH:mm"),
    "updated_at": st.column_config.DatetimeColumn("updated (UTC)", format="YYYY-MM-DD HH:mm:ss"),
})

st.subheader("Compare runs")
ids = [r["run_id"] for r in rows]
chosen = st.multiselect("Runs to compare", ids, default=ids[:min(3, len(ids))], key="compare_runs")
curves = {}
for run_id in chosen:
    folder = resolve(runs, run_id, ids)
    if folder is None:
        continue
    gens = ui.generations(str(folder), ui.signature(folder))
    if not gens.empty:
        curves[run_id] = data.fitness_curves(gens)
st.plotly_chart(charts.compare_runs(curves), key="compare_chart", config={"displaylogo": False})
st.caption("Best fitness is normalised against each run's own baseline, so runs on different devices or "
           "problem sizes compare by how far each got past its baseline, not in absolute time.")
