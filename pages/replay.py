"""Replay page: recorded sweeps (``<runs>/sweeps/``) and how search strategies fare on them, replayed."""
from __future__ import annotations

import streamlit as st

from dashboard import replay as R
from dashboard import ui
from dashboard.settings import runs_dir

ui.ensure_navigation()

st.title("Replay")
runs = runs_dir()
if not any(p.is_dir() and not p.name.startswith(".") and p.name != "sweeps" for p in runs.iterdir()):
    ui.no_runs_message()
found = R.find_sweeps(runs)
if not found:
    st.info(f"No recorded sweep in `{R.sweeps_dir(runs)}`. Record one with `python -m core sweep --workload rmsnorm "
            f"--backend c --vary threads,rows_per_chunk --out {R.sweeps_dir(runs)}/rmsnorm` and replay strategies on it "
            "with `python -m core replay FOLDER --strategy ga,random,tpe --save` (docs/search.md).")
    st.stop()
names = {p.name: p for p in found}
folder = names[st.selectbox("Sweep", list(names), key="replay_sweep")]
try:
    header = R.read_header(folder)
    table = R.table_frame(folder)
except R.TableError as exc:
    st.error(str(exc))
    st.stop()
ok = table[table["status"] == "ok"] if not table.empty else table
st.caption(f"**{header['workload']}** on **{header['backend']}** · {header.get('device') or '-'} · problem "
           f"`{header.get('problem')}` · {len(table)} genomes ({header.get('mode')}), {len(ok)} ok · cache "
           f"{header.get('cache') or '-'} · timer {header.get('timer_version') or '-'}")
if header.get("command"):
    st.code(header["command"], language="bash")

saved = R.replays(folder)
st.subheader("Replays")
if not saved:
    st.info(f"No saved replay of this sweep: `python -m core replay {folder} --strategy ga,random,tpe --save`.")
else:
    record = saved[st.selectbox("Replay", list(saved), key="replay_record")]
    s = record["settings"]
    st.caption(f"Budget {s['budget']} evaluations, {s['seeds']} seeds, init {s['init']}, population "
               f"{s['population']}; best known {record['summary']['best_known_us']:.3f} us. Score: 0 is random "
               "search's expectation, 1 finds the best at once.")
    st.plotly_chart(R.curves_figure(record), use_container_width=True, key="replay_curves")
    st.dataframe(R.summary_frame(record), hide_index=True, use_container_width=True)
st.subheader("Table")
st.dataframe(table.head(500), hide_index=True, use_container_width=True)
