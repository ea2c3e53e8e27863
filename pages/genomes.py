"""Genomes page: two individuals side by side -- genes, kernel source diff -- and the champion's lineage."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import genomes as G
from dashboard import ui

ui.ensure_navigation()

run_id, folder = ui.run_page("Genomes")
sig = ui.signature(folder)
history = ui.history(str(folder), sig)
if history.empty:
    st.info("No generation has been committed yet: come back when the first one is done.")
    st.stop()
firsts = G.first_appearances(history)
ok = history[history["status"] == "ok"]
champion = ok.sort_values(["fitness", "generation"], ascending=[False, True]).iloc[0] if not ok.empty else history.iloc[-1]
chain = G.lineage(firsts, champion["genome_hash"])
default_b = champion["genome_hash"]
default_a = G.default_partner(history, chain)
if st.session_state.get("genomes_run") != run_id:  # a new run: reset both pickers to the defaults
    st.session_state["genomes_run"] = run_id
    for side, h in (("A", default_a), ("B", default_b)):
        st.session_state[f"gen_{side}"] = int(firsts.loc[h, "generation"])
        st.session_state[f"ind_{side}"] = h
wanted = (st.query_params.get("a"), st.query_params.get("b"))  # from Monitor's champion timeline
if all(h in firsts.index for h in wanted) and st.session_state.get("genomes_pair") != wanted:
    st.session_state["genomes_pair"] = wanted
    for side, h in zip("AB", wanted):
        st.session_state[f"gen_{side}"] = int(firsts.loc[h, "generation"])
        st.session_state[f"ind_{side}"] = h

latest = int(history["generation"].max())


def chooser(col, side: str, title: str) -> pd.Series:
    """Generation + individual pickers for one side; returns the chosen row (one generation's data)."""
    col.markdown(f"**{title}**")
    gen = int(col.number_input("Generation", min_value=0, max_value=latest, step=1, key=f"gen_{side}"))
    inds = ui.individuals(str(folder), gen, sig if gen == latest else ())
    inds = inds.sort_values("fitness", ascending=False).drop_duplicates("genome_hash")
    options = list(inds["genome_hash"])
    if not options:
        col.warning("This generation has no individuals.")
        st.stop()
    if st.session_state.get(f"ind_{side}") not in options:
        st.session_state[f"ind_{side}"] = options[0]
    rows = {r["genome_hash"]: r for r in inds.to_dict("records")}
    h = col.selectbox("Individual", options, key=f"ind_{side}", format_func=lambda x: G.individual_label(rows[x]))
    return inds[inds["genome_hash"] == h].iloc[0]


left, right = st.columns(2)
a = chooser(left, "A", "A (default: the champion's parent)")
b = chooser(right, "B", "B (default: the champion)")
for col, row in ((left, a), (right, b)):
    col.caption(f"origin {row['origin']} · status {row['status']}"
                + (f" ({row['cause']})" if row.get("cause") else "")
                + f" · time {row['time_us']:.2f} µs" * (pd.notna(row.get("time_us")))
                + f" · parents {', '.join(G.parents_of(row['parents'])) or '—'}")

st.subheader("Genes")
table = G.gene_table(a["genome"], b["genome"])
n_changed = int(table["changed"].sum())
st.caption(f"{n_changed} of {len(table)} genes differ (highlighted)." if n_changed else "The two genomes are identical.")
styled = table.style.apply(lambda r: ["background-color: #fef3c7; font-weight: 600" if r["changed"] else ""] * len(r), axis=1)
st.dataframe(styled, hide_index=True, width="stretch", key="gene_table", height=35 * (len(table) + 1) + 3,
             column_config={"changed": st.column_config.CheckboxColumn("changed", width="small")})

st.subheader("Kernel source")
ka = ui.kernel(str(folder), a["source_hash"]) if a.get("source_hash") else None
kb = ui.kernel(str(folder), b["source_hash"]) if b.get("source_hash") else None
if not ka or not kb:
    st.info("One of the two has no rendered kernel stored (a lethal candidate rejected before rendering).")
else:
    patch = G.source_diff(ka["source"], kb["source"], f"A/{a['genome_hash']}", f"B/{b['genome_hash']}")
    if patch:
        n_lines = patch.count("\n")
        st.caption(f"unified diff, {sum(l.startswith('+') for l in patch.splitlines()) - 1} lines added, "
                   f"{sum(l.startswith('-') for l in patch.splitlines()) - 1} removed")
        st.code(patch, language="diff", height=640 if n_lines > 32 else "content")
    else:
        st.success("Both genomes render to the same source.")
    with st.expander("Full sources side by side"):
        c1, c2 = st.columns(2)
        lang = G.source_language(ka.get("backend"))
        c1.code(ka["source"], language=lang, line_numbers=True, height=640)
        c2.code(kb["source"], language=lang, line_numbers=True, height=640)

st.subheader("Lineage of the champion")
st.caption("From the champion back to a seed or random genome, following the fitter parent at each step.")
lin = pd.DataFrame([{**s, "parents": ", ".join(s["parents"]) or "—"} for s in chain])
st.dataframe(lin, hide_index=True, width="stretch", key="lineage",
             column_config={"fitness": st.column_config.NumberColumn(format="%.4f")})
