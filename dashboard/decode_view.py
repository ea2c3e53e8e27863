"""The Benchmark page's second view: a library's decode step (``decode-bench`` records; :mod:`dashboard.decode`)."""
from __future__ import annotations

import streamlit as st

from dashboard import decode as D
from dashboard.settings import runs_dir

VIEWS = ("A run's champion", "A library's decode step")


def chosen() -> bool:
    """The sidebar's choice between the two views (``?view=decode`` opens the decode step); True for decode."""
    if st.query_params.get("view") == "decode" and "bench_view" not in st.session_state:
        st.session_state["bench_view"] = VIEWS[1]
    view = st.sidebar.radio("Benchmark", VIEWS, key="bench_view")
    if view == VIEWS[1]:
        st.query_params["view"] = "decode"
    elif st.query_params.get("view") == "decode":
        del st.query_params["view"]
    return view == VIEWS[1]


def show() -> None:
    """The decode step of one record: tokens/s of (a) and (b), verify costs, projections, breakdown."""
    st.title("Benchmark · decode step")
    found = D.records(runs_dir())
    if not found:
        folders = ", ".join(f"`{f}`" for f in D.record_folders(runs_dir())[:2])
        st.info("No decode-bench record yet (looked in " + folders + "). Make one with `python -m core decode-bench "
                "--model llama-3.1-70b --layers 8 --seed-library --library-out LIB --verify 1,2,3,4,7 --save` "
                "(docs/decode.md).")
        return
    by_path = {str(p): (p, r) for p, r in found}
    key = st.selectbox("Record", list(by_path), format_func=lambda k: D.title(by_path[k][1]), key="decode_record")
    path, rec = by_path[key]
    copies = int(rec.get("copies") or 1)
    rotation = (f"{copies} layer copies rotated (weights read from memory, not the L2)" if copies > 1 else
                "one copy of the layers")
    st.caption(f"`{path}` · {rec.get('dtype', '?')}, batch {rec.get('batch', 1)}, {rotation} · torch "
               f"{rec.get('torch', '?')}" + (f" · command: `{rec['command']}`" if rec.get("command") else ""))
    _ways(rec)
    _verify(rec)
    _breakdown(rec)


def _ways(rec: dict) -> None:
    df = D.ways(rec)
    full = "projected" if D.projected(rec) else "measured"
    c = st.columns(3)
    for col, (_, row) in zip(c, df.iterrows()):
        col.metric(f"{row['way']} tokens/s ({full})", f"{row['model_tokens_per_s']:.1f}",
                   help=f"{row['runs']}; the {rec['layers']}-layer step measured: {row['tokens_per_s']:.1f} tokens/s")
    c[2].metric("(b) over (a)", f"{df['vs_a'].iloc[1]:.2f}×", help="(a)'s ms per step / (b)'s, same process")
    if D.projected(rec):
        st.caption(f"Whole-model figures are **projected** from {rec['layers']} of {rec['model_layers']} layers: "
                   f"{rec['b'].get('projection', '')}. LM head {rec.get('lm_head_ms')} ms.")
    st.dataframe(df, hide_index=True, width="stretch", key="decode_ways", column_config={
        "way": "way", "runs": "what ran",
        "ms_per_step": st.column_config.NumberColumn(f"ms/step ({rec['layers']} layers)", format="%.3f"),
        "tokens_per_s": st.column_config.NumberColumn(f"tokens/s ({rec['layers']} layers)", format="%.1f"),
        "model_tokens_per_s": st.column_config.NumberColumn("tokens/s, whole model", format="%.1f"),
        "model_figure": "whole model is",
        "vs_a": st.column_config.NumberColumn("speed-up vs (a)", format="%.2f×"),
        "argmax": st.column_config.TextColumn("argmax agreement", help="steps agreeing with the fp32 reference / "
                                              "steps counted (reference top-2 gap above the tolerance)"),
        "max_error_over_std": st.column_config.NumberColumn("max logit error / std", format="%.3g")})


def _verify(rec: dict) -> None:
    st.subheader("Speculative verify step")
    v = D.verify(rec)
    if v.empty:
        st.caption("This record has no verify steps (decode-bench --verify 1,2,3,4,7).")
        return
    st.dataframe(v, hide_index=True, key="decode_verify", column_config={
        "a_ms": st.column_config.NumberColumn("(a) ms", format="%.3f"),
        "a_x_one_token": st.column_config.NumberColumn("(a) × one-token step", format="%.3f"),
        "b_ms": st.column_config.NumberColumn("(b) ms", format="%.3f"),
        "b_x_one_token": st.column_config.NumberColumn("(b) × one-token step", format="%.3f")})
    st.markdown("**Projected** tokens/s for mean acceptance lengths 2–4: no draft model here, its cost left out.")
    st.dataframe(D.projection(rec), hide_index=True, key="decode_projection", column_config={
        "acceptance_length": "acceptance length",
        "a_tokens_per_s": st.column_config.NumberColumn(f"(a) tokens/s ({rec['layers']} layers)", format="%.1f"),
        "b_tokens_per_s": st.column_config.NumberColumn(f"(b) tokens/s ({rec['layers']} layers)", format="%.1f"),
        "model_a_tokens_per_s": st.column_config.NumberColumn("(a) tokens/s, whole model", format="%.1f"),
        "model_b_tokens_per_s": st.column_config.NumberColumn("(b) tokens/s, whole model", format="%.1f"),
        "figure": "figure"})


def _breakdown(rec: dict) -> None:
    st.subheader("Per-op breakdown of the one-token step")
    for w in D.WAYS:  # one under the other: each table is wide
        df, note = D.breakdown(rec, w)
        col = st.container()
        col.markdown(f"**{D.WAYS[w]}**")
        col.dataframe(df, hide_index=True, key=f"decode_ops_{w}", height=36 * (len(df) + 1) + 3, column_config={
            "ms": st.column_config.NumberColumn("ms per step", format="%.4f"),
            "share": st.column_config.ProgressColumn("share", format="percent", min_value=0.0, max_value=1.0),
            "weights_from_memory": st.column_config.CheckboxColumn(
                "weights from memory", help="the op's weights over all layer copies exceed the L2, so its replays "
                "read them from memory as the step does (empty on a CPU)")})
        col.caption(note)
