"""Export page: the champion, the top k or the Pareto set, as a zip download or a folder in the run."""
from __future__ import annotations

import time

import streamlit as st

from core.tools.export import export_champions, export_zip
from dashboard import ui
from store.reader import RunReader
from store.schema import StoreError

ui.ensure_navigation()

run_id, folder = ui.run_page("Export")
st.caption("A README (how to run them, and the one shape they were tuned for) and a requirements.txt come with "
           "the kernels. Each kernel comes as its own folder: the kernel source, `launch.json`, `genome.json`, `report.json` "
           "(measurements, baseline, hardware, versions, verification record) and `run_kernel.py`, a standalone "
           "script that recompiles, re-verifies and re-times the kernel.")
champ = RunReader(folder).champion()
if champ is None:
    st.info("Nothing to export yet: no candidate of this run has passed verification.")
    st.stop()
st.markdown(f"Champion `{champ['genome_hash']}` from generation {champ['generation']} · fitness {champ['fitness']:.4f}")
labels = {"champion": "The champion", "top": "The top k distinct genomes", "pareto": "The Pareto set (last generation)"}
c1, c2 = st.columns([2, 1])
which = c1.radio("What to export", list(labels), format_func=labels.get, key="export_which", horizontal=True)
k = int(c2.number_input("k", min_value=1, max_value=100, value=5, step=1, key="export_k", disabled=which == "champion",
                        help="how many kernels for top k; the most for the Pareto set"))
d1, d2 = st.columns(2)
d1.download_button("Download zip", icon=":material/download:", data=lambda: export_zip(folder, which, k), file_name=f"{run_id}-{which}.zip",
                   mime="application/zip", type="primary", key="export_download", on_click="ignore")
if d2.button("Write to the run's exports/ folder", icon=":material/create_new_folder:", key="export_folder"):
    out = folder / "exports" / f"{which}{'' if which == 'champion' else f'-{k}'}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        export_champions(folder, out, which, k)
    except StoreError as exc:
        st.error(str(exc))
    else:
        files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
        st.success(f"Written to `{out}`")
        st.code("\n".join(files), language="text")
