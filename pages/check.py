"""Check a kernel: upload a source file, run it through ``core check`` (the CLI's path and device lock)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from core.workloads import WORKLOADS, get_workload
from dashboard import checkkernel as K
from dashboard import data, ui
from dashboard.settings import runs_dir

ui.ensure_navigation()

st.title("Check a kernel")
st.caption("Runs a kernel you wrote through exactly the protocol evolution uses — `python -m core check` — and says "
           "whether AbeBot would trust its numbers. It takes the device's lock: it waits for no run, it is refused "
           "while a run, a benchmark or another check holds the device.")
c1, c2, c3 = st.columns([2, 1, 1])
workload = c1.selectbox("Workload", list(WORKLOADS), key="check_workload")
backend = c2.selectbox("Backend", list(get_workload(workload).templates), key="check_backend")
device = int(c3.number_input("Device", min_value=0, value=0, step=1, key="check_device"))
with st.expander("The entry contract (what the kernel must look like)"):
    from core.tools.contract import contract_text

    st.markdown(contract_text(workload, backend))
upload = st.file_uploader("Kernel source", type=["c", "cu", "cuh", "py", "txt"], key="check_file")
p1, p2 = st.columns(2)
hint_problem, hint_launch = K.placeholders(workload, backend)  # this workload's own settings, not GEMM's
problem = p1.text_input("Problem (JSON, optional)", key="check_problem", placeholder=hint_problem)
launch = p2.text_input("Launch keys (JSON, optional)", key="check_launch", placeholder=hint_launch)
# -- isolation (issue 35; core/evaluation/isolation.py): said plainly before an upload runs --
from core.evaluation import isolation  # noqa: E402

isolate = st.toggle("Isolate the kernel (Linux namespaces)", value=isolation.mode() != "none", key="check_isolate",
                    disabled=isolation.mode() == "none", help="bubblewrap, or unshare: see docs/security.md")
(st.info if isolate and isolation.mode() == "bwrap" else st.warning)(isolation.describe(isolate),
                                                                     icon=":material/shield:")
# -- end isolation --
if st.button("Check", type="primary", icon=":material/fact_check:", key="check_run", disabled=upload is None):
    try:
        path = K.save_upload(runs_dir(), backend, upload.getvalue(), upload.name)
    except (ValueError, OSError) as exc:
        st.session_state["check_outcome"] = {"exit": 2, "result": None, "report": "", "error": str(exc)}
    else:
        try:
            with st.spinner("Compiling, verifying on every shape, timing against the baselines…"):
                st.session_state["check_outcome"] = K.run_check(K.check_argv(runs_dir(), path, workload, backend,
                                                                             problem, launch, device, isolate),
                                                                upload.name)
        finally:
            K.drop_upload(path)  # the compile cache keeps what is worth keeping
outcome = st.session_state.get("check_outcome")
if outcome:
    r = outcome["result"]
    if r is None:
        st.error(outcome["error"] or f"core check exited with status {outcome['exit']}", icon=":material/block:")
        st.stop()
    if r["ok"]:
        st.success(f"Verdict: **ok** on {r['device']}", icon=":material/check_circle:")
    else:
        st.error(f"Verdict: **{r['status']}** — {r['cause']}", icon=":material/cancel:")
    if not r.get("baselines"):  # rejected by the static check or the compile: nothing ran, nothing to tabulate
        log = (r.get("evaluation") or {}).get("compile_log")
        st.caption("Rejected before verification: no baseline was timed.")
        if log:
            st.code(log, language="text")
        st.stop()
    m = st.columns(4)
    m[0].metric("Median time", data.fmt_time_us(r.get("time_us")))
    primary = (r.get("baselines") or {}).get(r.get("primary") or "", {})
    m[1].metric(f"vs {r.get('primary') or 'baseline'}", f"{primary['speedup']:.2f}×" if primary.get("speedup") else "—")
    roof = r.get("roofline") or {}
    m[2].metric("Of the roofline", f"{roof['percent']:.1f} %" if roof.get("percent") else "n/a",
                help=f"{roof.get('bound') or '?'}-bound")
    m[3].metric("Memory", data.fmt_bytes(r.get("memory_bytes")))
    st.markdown("**Worst error on each verification shape**")
    st.dataframe(pd.DataFrame([{**{k: v for k, v in e.items() if k != "shape"}, "shape": data.fmt_problem(e.get("shape"))}
                               for e in r.get("shape_errors") or []]), hide_index=True, width="stretch",
                 key="check_shapes")
    st.markdown("**Timing against the baselines** (same process, same protocol)")
    st.dataframe(pd.DataFrame([{"baseline": k, **v} for k, v in (r.get("baselines") or {}).items()]),
                 hide_index=True, width="stretch", key="check_baselines")
    with st.expander("The full report (as the CLI prints it)"):
        st.code(outcome["report"], language="text")
