"""Launch page: configure a run (form generated from RunConfig's field metadata) and start the worker.

The inputs are not an ``st.form``: a form hands back its values only when submitted, and the
"Same run from a terminal" command must follow what is typed now.
"""
from __future__ import annotations

import json
import os

import streamlit as st

from core.backends import backend_class
from core.config import FIELDS, ConfigError
from core.workloads import WORKLOADS, get_workload
from dashboard import launch as L
from dashboard import ui
from dashboard.devices import device_choices
from dashboard.settings import runs_dir

ui.ensure_navigation()
FIELDS_HELP = {name: FIELDS[name].metadata["help"] for name in ("devices", "cluster", "start_from")}

st.title("Launch a run")
st.caption("Evolve a kernel with a genetic algorithm. The run is a separate process: closing this tab or "
           "restarting the dashboard does not stop it.")

runs = runs_dir()
devices, unavailable = device_choices()
L.apply_relaunch(st.session_state, devices)  # "launch again with these settings" from the Runs page
left, right = st.columns(2)
# The name alone fits the box; the description goes underneath instead of being cut off.
workload_name = left.selectbox("Workload", list(WORKLOADS), key="launch_workload")
left.caption(get_workload(workload_name).description)
device = right.selectbox("Target device", devices, key="launch_device", format_func=lambda d: d["label"],
                         help="Every device of every backend that can run here; the CPU (backend c) always can.")
if unavailable:
    right.caption("Not available here: " + ", ".join(f"`{b}`" for b in unavailable),
                  help="\n\n".join(f"**{b}**: {why}" for b, why in unavailable.items()))
workload = get_workload(workload_name)
try:
    defaults = workload.default_problem(device["backend"])
except Exception:  # a workload without this backend: validation says so on submit
    defaults = {}


def number(container, name: str, label: str | None = None):
    """A number input for a RunConfig field; bounds are checked by RunConfig, not the widget.

    The widget may be empty (``value=None``; its state starts at the default): text that is not a
    number leaves it empty rather than silently back at the default, and an empty field blocks Start
    and says so (see ``empty`` below)."""
    spec = L.field_spec(name)
    bounds = " · ".join(x for x in (f"min {spec['min']}" if spec["min"] is not None else "",
                                    f"max {spec['max']}" if spec["max"] is not None else "") if x)
    help_text = spec["help"] + (f" ({bounds})" if bounds else "")
    key, shown = f"launch_{name}", label or spec["label"]
    if spec["kind"] == "int":
        st.session_state.setdefault(key, spec["default"])
        value = container.number_input(shown, value=None, step=1, help=help_text, key=key, placeholder="a whole number")
    else:
        st.session_state.setdefault(key, float(spec["default"]))
        value = container.number_input(shown, value=None, step=0.05, format="%.3f", help=help_text, key=key,
                                       placeholder="a number")
    if value is None:
        empty.append(shown)
    return value


def weight(container, spec: dict) -> float:
    """The number input of one objective's fitness weight (may be empty, like :func:`number`)."""
    st.session_state.setdefault(spec["key"], spec["default"])
    value = container.number_input(spec["label"], value=None, step=0.05, format="%.3f",
                                   help=spec["help"] + " (min 0)", key=spec["key"], placeholder="a number")
    if value is None:
        empty.append(spec["label"])
    return value


empty: list[str] = []  # labels of number fields left empty or holding text that is not a number
same_backend = [d for d in devices if d["backend"] == device["backend"]]
if len(same_backend) > 1:  # several GPUs of this backend: spread the evaluations over some or all of them
    spread = right.multiselect("Evaluate on", same_backend, default=[device], key="launch_devices",
                               format_func=lambda d: f"{d['backend']}:{d['index']}",
                               help=FIELDS_HELP["devices"])
    device_list = ",".join(str(d["index"]) for d in spread) if len(spread) > 1 else ""
elif backend_class(device["backend"]).device_kind == "cpu":  # the CPU: its cores split into disjoint core sets, one sandbox each
    sets = right.number_input("CPU core sets", min_value=1, max_value=max(1, os.cpu_count() or 1), value=1, step=1,
                              key="launch_core_sets", help=FIELDS_HELP["devices"])
    device_list = ",".join(str(i) for i in range(int(sets))) if sets > 1 else ""
else:
    device_list = ""

with st.container(border=True):
    values: dict = {"workload": workload_name, "backend": device["backend"], "device": device["index"],
                    "devices": device_list}
    c1, c2, c3, c4 = st.columns(4)
    values["population"] = number(c1, "population")
    values["generations"] = number(c2, "generations")
    values["hours"] = number(c3, "hours", "Hours (0 = no limit)")
    values["seed"] = number(c4, "seed")
    st.markdown("**Fitness weights** — each term is normalised against the baseline measured at the start of the run")
    specs = L.weight_specs()
    values["weights"] = {spec["name"]: weight(column, spec) for column, spec in zip(st.columns(len(specs)), specs)}
    g1, g2, g3 = st.columns(3)
    values["mutation_rate"] = number(g1, "mutation_rate")
    values["elites"] = number(g2, "elites")
    sel = L.field_spec("selection")
    values["selection"] = g3.selectbox("Selection", sel["choices"], index=sel["choices"].index(sel["default"]),
                                       help=sel["help"], key="launch_selection")
    values["problem_text"] = st.text_input(
        "Problem (JSON)", key="launch_problem", placeholder=json.dumps(defaults),
        help=f"Problem sizes; empty uses the workload's defaults for this backend: {json.dumps(defaults)}")
    with st.expander("Advanced"):
        cols = st.columns(3)
        for i, name in enumerate(L.ADVANCED_FIELDS):
            values[name] = number(cols[i % 3], name)
        values["cluster"] = st.text_input("Dask cluster", key="launch_cluster", placeholder="tcp://scheduler:8786 or local:2",
                                          help=FIELDS_HELP["cluster"]).strip()
        earlier = L.start_from_choices(runs, workload_name, device["backend"])
        values["start_from"] = ",".join(st.multiselect("Start from runs (warm start)", earlier, key="launch_start_from",
                                                       help=FIELDS_HELP["start_from"]))
    if empty:
        st.error(f"Cannot start: {', '.join(empty)} must be a number (the field is empty or its text is not a number).",
                 icon=":material/warning:")
    submitted = st.button("Start run", type="primary", key="launch_start", disabled=bool(empty))

if submitted and not empty:
    try:
        cfg = L.build_config(values)
    except ConfigError as exc:
        st.error(f"Cannot start: {exc}", icon=":material/warning:")
        st.stop()
    reason = L.busy_reason(runs, cfg.backend, L.run_devices(cfg), st.session_state.get("last_launch_at"))
    if reason:
        st.warning(reason, icon=":material/block:")
        st.stop()
    item = L.launch_run(cfg, runs)
    st.session_state["last_launch_at"] = item.started_at
    st.session_state["current_run"] = item.run_id
    st.session_state.pop("run_select", None)
    with st.spinner(f"Starting run {item.run_id}…"):
        listed = L.wait_until_listed(runs, item)
    if listed:
        st.switch_page("pages/monitor.py", query_params={"run": item.run_id})
    st.error(f"Run {item.run_id} did not start. Last lines it wrote:")
    st.code("\n".join(L.stderr_tail(runs, item.run_id)) or "(nothing)", language="text")
    st.stop()

with st.expander("Same run from a terminal"):
    try:
        st.code(L.terminal_command(L.build_config(values), runs), language="bash")
    except ConfigError as exc:
        st.caption(f"(fix the form first: {exc})")
