"""Library page: a kernel library's coverage (op x shape x M bucket), its misses, and building them."""
from __future__ import annotations

import streamlit as st

from core.library.manifest import Library, LibraryError
from dashboard import library as L
from dashboard import ui
from dashboard.settings import runs_dir

ui.ensure_navigation()

st.title("Library")
runs = runs_dir()
if not any(p.is_dir() and not p.name.startswith(".") for p in runs.iterdir()):
    ui.no_runs_message()
found = L.find_libraries(runs)
if not found:
    st.info("No kernel library yet in " + " or ".join(f"`{p}`" for p in L.library_folders(runs))
            + ". Build one with `python -m core library build --model llama-3.1-8b --out "
            f"{L.library_folders(runs)[0]}/llama-8b` (docs/library.md).")
    st.stop()
names = {str(p): p for p in found}
wanted = st.query_params.get("lib")
root = names[st.selectbox("Library", list(names), index=list(names).index(wanted) if wanted in names else 0,
                          key="library_pick")]
try:
    lib = Library.load(root)
except LibraryError as exc:
    st.error(str(exc))
    st.stop()
devices = sorted({e.device.get("name", "?") for e in lib.entries})
st.caption(f"Model **{lib.model or '-'}** · {len(lib.entries)} entries · created {lib.created or '-'} · "
           f"devices: {', '.join(devices) or '-'}. Each cell: the entry's speed-up over its fastest baseline "
           "(cold cache, in interleaved pairs), and a link to the run that evolved it.")

st.subheader("Coverage")
grid = L.coverage(lib)
if grid.empty:
    st.info("This library has no entries yet.")
else:
    m_columns = [c for c in grid.columns if c.startswith("M=")]
    grid[m_columns] = grid[m_columns].fillna("")  # a bucket not built: an empty cell, not "None"
    st.dataframe(grid, hide_index=True, key="library_grid",
                 column_config={c: st.column_config.LinkColumn(c, display_text=r"#(.*)$") for c in m_columns})

st.subheader("Misses")
missed = L.missing(lib, root)
if missed.empty:
    st.caption("No call has missed this library (the dispatcher appends each missed key to `misses.jsonl`).")
    st.stop()
st.dataframe(missed, hide_index=True, key="library_misses")
running = L.build_running(root)
if running is not None:
    st.info(f"A build of the missing entries is running (pid {running.process.pid}); its runs appear on the "
            "Runs page as they start.")
    st.stop()
from core.backends import BACKENDS, availability  # noqa: E402 -- only when there is something to build

usable = [b for b in BACKENDS if availability(b) is None]
c1, c2, c3 = st.columns(3)
backend = c1.selectbox("Backend", usable, key="library_backend")
device = int(c2.number_input("Device", min_value=0, max_value=64, value=0, step=1, key="library_device"))
budget = c3.selectbox("Budget per entry", ["2", "8", "32", "10m/entry", "1h/entry"], index=1, key="library_budget",
                      help="generations per entry, or minutes/hours of evolution per entry")
if st.button("Build the missing entries", icon=":material/construction:", type="primary", key="library_build"):
    from dashboard.launch import busy_reason

    reason = busy_reason(runs, backend, device)
    if reason:
        st.error(reason)
    else:
        item = L.start_build(root, runs, backend, device, budget)
        st.success(f"Started `{' '.join(L.build_argv(root, runs, backend, device, budget)[1:])}` "
                   f"(pid {item.process.pid}); each entry is a run on the Runs page.")
