"""Benchmark page: the champion against the workload's baselines, measured side by side in one run."""
from __future__ import annotations

import time

import streamlit as st

from dashboard import benchmark as B
from dashboard import charts, data, decode_view, plotly_basic, ui
from dashboard import launch as L
from dashboard.runs import load_json
from dashboard.settings import runs_dir
from store.reader import RunReader

ui.ensure_navigation()
if decode_view.chosen():  # a library's decode step (decode-bench records), not a run's
    decode_view.show()
    st.stop()

run_id, folder = ui.run_page("Benchmark")
reader = RunReader(folder)
base = reader.baseline()
if not base:
    st.info("This run has not measured its baselines yet (the worker does that first, before generation 0).")
    st.stop()
champ = reader.champion()


@st.fragment(run_every=2.0 if (L.launched(f"bench:{run_id}") and L.launched(f"bench:{run_id}").alive()) else None)
def remeasure() -> None:
    """The re-measure button (``python -m core bench``) and its progress."""
    item = L.launched(f"bench:{run_id}")
    if item and item.alive():
        st.info(f"Re-measuring the champion and every baseline, interleaved rounds… (started "
                f"{data.duration(time.time() - item.started_at)} ago)", icon=":material/timer:")
        return
    if item and item.process.poll() == 0 and st.session_state.get("bench_shown") != item.started_at:
        st.session_state["bench_shown"] = item.started_at  # it just finished: redraw with its figures
        st.session_state["bench_source"] = "re-measured"
        st.rerun(scope="app")
    if item and item.process.poll() not in (None, 0):
        st.error("The re-measurement failed: " + " ".join(L.stderr_tail(runs_dir(), run_id)[-3:]))
    if st.button("Re-measure now", icon=":material/timer:", key="bench_now", disabled=champ is None,
                 help="python -m core bench: champion and baselines side by side in one process, median of 3 rounds"):
        cfg = reader.config()
        reason = L.busy_reason(runs_dir(), str(cfg.get("backend")), int(cfg.get("device", 0)))
        if reason:
            st.warning(reason + " Measuring now would disturb both.")
        else:
            L.bench_run(runs_dir(), run_id)
            st.rerun()


bench = load_json(folder / "bench.json")
fresh = bool(bench and champ and bench.get("genome_hash") == champ.get("genome_hash"))
for warning in B.bench_warnings(bench, base, champ) if fresh else []:
    st.warning(warning, icon=":material/warning:")
top = st.columns([3, 1])
with top[1]:
    remeasure()
if fresh:
    when = data.duration(time.time() - float(bench.get("measured_at") or time.time()))
    source = top[0].radio("Figures", ["re-measured", "run start"], horizontal=True, key="bench_source",
                          format_func={"re-measured": f"re-measured {when} ago (median of {bench.get('rounds')} rounds)",
                                       "run start": "from the run itself"}.get)
    if source == "re-measured":
        base, champ = B.from_bench(bench)
elif bench:
    top[0].caption("A re-measurement exists for an earlier champion; showing the figures from the run.")
dev = base.get("device") or {}
top[0].caption(f"Run `{run_id}` on **{dev.get('name', '?')}** ({dev.get('backend', '?')}:{dev.get('index', 0)}) · "
               f"shape {base.get('shape', {})} · champion and baselines were timed in one process on the same device"
               + (", in interleaved rounds." if fresh and st.session_state.get("bench_source") == "re-measured" else
                  " (baselines at run start, the champion during the run)."))
df = B.table(base, champ)
if champ is None:
    st.warning("No candidate has passed verification yet; only the baselines are shown.")
else:
    c = st.columns(4)
    c[0].metric("Champion time", data.fmt_time_us(champ.get("time_us")))
    paired = champ.get("speedup") if champ.get("speedup") == champ.get("speedup") else None
    c[1].metric(f"vs {base.get('primary', 'baseline')}",
                f"{paired:.2f}×" if paired else f"{base['time_us'] / champ['time_us']:.2f}×",
                delta="NOISY" if champ.get("noisy") is True else None, delta_color="inverse",
                help="the champion's speed-up, timed in interleaved pairs beside the baseline where it was "
                     "(baseline time / champion time otherwise): above 1 means the champion is faster")
    c[2].metric("Champion memory", data.fmt_bytes(champ.get("memory_bytes")),
                f"{(champ['memory_bytes'] / base['memory_bytes'] - 1) * 100:+.0f}% vs baseline"
                if champ.get("memory_bytes") and base.get("memory_bytes") else None, delta_color="inverse")
    if base.get("roofline_us"):
        c[3].metric("Of the roofline", f"{base['roofline_us'] / champ['time_us'] * 100:.1f}%",
                    help="roofline time / champion time: 100% would be the hardware's limit")
    else:
        c[3].metric("Of the roofline", "n/a", help="No roofline: " + B.roofline_reason(base))
left, right = st.columns([3, 2])
plotly_basic.chart(left, charts.benchmark_bars(df[df["kind"] != "roofline"], base.get("roofline_us")), "bench_time")
plotly_basic.chart(right, charts.memory_bars(df[df["kind"] != "roofline"]), "bench_memory")
first = "GFLOP/s" if B.bound(base) == "compute" else "GB/s"
unit, scale = B.memory_unit(df)
shown = df.drop(columns=["kind"]).assign(memory_bytes=df["memory_bytes"] / scale)  # the metrics' unit
st.dataframe(
    shown, hide_index=True, width="stretch", key="bench_table",
    column_order=["name", "time_us", "spread_us", "speedup_vs_primary", "champion_speedup",
                  "gflops" if first == "GFLOP/s" else "gbps", "gbps" if first == "GFLOP/s" else "gflops", "memory_bytes",
                  "independent_us", "host_overhead_us", "noisy"],
    column_config={
        "name": "implementation",
        "time_us": st.column_config.NumberColumn("time (µs)", format="%.2f"),
        "spread_us": st.column_config.NumberColumn("spread (µs)", format="%.2f"),
        "memory_bytes": st.column_config.NumberColumn(f"memory ({unit})", format="%.2f" if scale > 1 else "%d"),
        "speedup_vs_primary": st.column_config.NumberColumn(f"speed-up vs {base.get('primary', 'primary')}", format="%.2f×"),
        "champion_speedup": st.column_config.TextColumn("champion is … faster",
                                                        help="this baseline's time / the champion's"),
        "gflops": st.column_config.NumberColumn("GFLOP/s", format="%.1f"),
        "gbps": st.column_config.NumberColumn("GB/s (inputs + outputs)", format="%.1f"),
        "independent_us": st.column_config.NumberColumn(
            "second method (µs)", format="%.2f", help="core bench: a chain of launches over rotated copies of the "
            "inputs, no preparation between them (docs/measurement.md)"),
        "host_overhead_us": st.column_config.NumberColumn(
            "host µs / call", format="%.1f", help="host time of one eager call, outside a CUDA graph (core bench)"),
        "noisy": st.column_config.TextColumn("noisy", help="its pair ratios or its rounds spread over 10%"),
    })
st.caption(f"Cache policy: **{base.get('cache', 'cold')}**" + (f" ({base['evict']})" if base.get("evict") else "")
           + " · the same for the champion and every baseline (docs/measurement.md).")
roof = (f"roofline {data.fmt_time_us(base.get('roofline_us'))} (the fastest any kernel could be, from FLOPs and bytes)"
        if base.get("roofline_us") else f"no roofline: {B.roofline_reason(base)}")
launch = (f" · an empty kernel's launch {base['launch_us']:.2f} µs, timed the same way (no kernel is faster; "
          "below half of it a time is suspect)" if base.get("launch_us") else "")
st.caption(f"FLOPs per call {base.get('flops') or 0:,.0f} · bytes in + out {data.fmt_bytes(base.get('io_bytes'))} · {roof}{launch}.")
if champ and base.get("roofline_us") and champ["time_us"] < base["roofline_us"]:
    st.error("The champion is faster than the roofline: that is a measurement bug, not a breakthrough.")
