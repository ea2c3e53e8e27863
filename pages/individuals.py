"""Individuals page: every individual of a run, filtered and sorted in DuckDB; a row's kernel and its
diff against the champion; which genes matter, and a parallel-coordinates plot of the same filter."""
from __future__ import annotations

import streamlit as st

from dashboard import charts, parallel_chart, plotly_basic, ui
from dashboard import genomes as G
from dashboard import importance as I
from dashboard import individuals as IX
from store.reader import RunReader

ui.ensure_navigation()

PAGE_SIZES = (50, 100, 250, 500)  # rows sent to the browser per page; filters, sorting and downloads cover every row


@st.cache_data(max_entries=8, show_spinner=False)
def champion(folder: str, rows: int) -> dict | None:
    return RunReader(folder).champion()


run_id, folder = ui.run_page("Individuals")
created = IX.run_identity(folder)
table = IX.load_table(str(folder), created)
table.refresh()
if not table.rows:
    st.info("No generation has been committed yet: come back when the first one is done.")
    st.stop()
lo, hi = table.generation_span()
f1, f2, f3, f4 = st.columns([2, 2, 1, 1])
status = f1.multiselect("Status", table.distinct("status"), key="ind_status", placeholder="every status")
span = f2.slider("Generations", lo, hi, (lo, hi), key="ind_gens") if hi > lo else (lo, hi)
fit_min = f3.number_input("Fitness at least", value=None, step=0.05, key="ind_fit_min", placeholder="any")
prefix = f4.text_input("Genome hash starts with", key="ind_hash", max_chars=32)
gene_filters = {}
picked = st.multiselect("Filter on genes", table.genes, key="ind_gene_pick", format_func=lambda g: g[5:])
FILTERS_PER_ROW = 4  # more columns squash a filter's label letter by letter
for i, gene in enumerate(picked):
    if i % FILTERS_PER_ROW == 0:
        row_cols = st.columns(FILTERS_PER_ROW)
    gene_filters[gene] = row_cols[i % FILTERS_PER_ROW].multiselect(gene[5:], table.distinct(gene), key=f"ind_gene_{gene}")
filters = IX.filters(status, span, fit_min, prefix, gene_filters)
s1, s2, s3, s4, s5 = st.columns([2, 1, 1, 1, 1])
sort = s1.selectbox("Sort by", table.columns, index=table.columns.index("fitness"), key="ind_sort")
descending = s2.toggle("Descending", value=True, key="ind_desc")
size = s3.selectbox("Rows per page", PAGE_SIZES, index=1, key="ind_page_size")
s4.download_button("CSV", data=lambda: table.export(filters, "csv", sort, descending),
                   file_name=f"{run_id}-individuals.csv", mime="text/csv", icon=":material/download:", key="ind_csv",
                   on_click="ignore")
s5.download_button("Parquet", data=lambda: table.export(filters, "parquet", sort, descending),
                   file_name=f"{run_id}-individuals.parquet", mime="application/vnd.apache.parquet",
                   icon=":material/download:", key="ind_parquet", on_click="ignore")
matching = table.count(filters)
pages = max(1, -(-matching // size))
view = (repr(filters), sort, descending, size)
if st.session_state.get("_ind_view") != view:  # a new filter or order starts on its first page
    st.session_state["_ind_view"] = view
    st.session_state["ind_page"] = 1
    st.session_state.pop("ind_table", None)  # a selected row of the old view means nothing in the new one
st.session_state["ind_page"] = min(max(1, int(st.session_state.get("ind_page") or 1)), pages)
p1, p2 = st.columns([1, 5], vertical_alignment="bottom")
page = int(p1.number_input("Page", min_value=1, max_value=pages, step=1, key="ind_page"))
first = (page - 1) * size
rows = table.query(filters, sort=sort, descending=descending, limit=size, offset=first)
p2.caption(f"{matching:,} of {table.rows:,} individuals match" + (
    f"; rows {first + 1:,}–{first + len(rows):,} shown (page {page:,} of {pages:,}), sorted by {sort} "
    f"{'descending' if descending else 'ascending'} over every match; downloads hold all of them" if matching else "")
    + ". Select a row to see its kernel.")
event = st.dataframe(rows, hide_index=True, width="stretch", height=min(420, 38 + 35 * max(1, len(rows))),
                     key="ind_table", on_select="rerun", selection_mode="single-row",
                     column_config={c: st.column_config.TextColumn(c[5:]) for c in table.genes})
selected = event.selection.rows if event and hasattr(event, "selection") else []
selected = [i for i in selected if 0 <= i < len(rows)]  # a row index of a longer page (another filter, page)
if selected:
    row = rows.iloc[selected[0]]
    champ = champion(str(folder), table.rows)
    st.subheader(f"Kernel of {row['genome_hash']} (generation {int(row['generation'])}, {row['status']})")
    mine = ui.kernel(str(folder), row["source_hash"]) if isinstance(row.get("source_hash"), str) else None
    if not mine:
        st.info("No kernel stored for this individual (rejected before it was rendered).")
    else:
        theirs = champ.get("source") if champ else None
        if theirs and champ["genome_hash"] != row["genome_hash"]:
            patch = G.source_diff(theirs, mine["source"], f"champion/{champ['genome_hash']}", f"this/{row['genome_hash']}")
            st.code(patch or "(same source as the champion)", language="diff", height=400)
        elif champ and champ["genome_hash"] == row["genome_hash"]:
            st.caption("This is the champion.")
        with st.expander("Full source", expanded=not theirs):
            st.code(mine["source"], language=G.source_language(mine.get("backend")), line_numbers=True, height=500)

st.subheader("Which genes matter")
st.caption("scikit-learn: a random forest fitted to the genes of the individuals that match the filter above, and "
           "the permutation importance of each gene on genomes held out from the fit (see dashboard/importance.py "
           "for why). Low forest R² means fitness depends on something the genes do not explain (noise, mostly).")
if st.toggle("Compute gene importance", value=True, key="ind_importance",
             help="Fits a forest on up to 3,000 distinct genomes: under a second."):
    imp, par, fitted = IX.importance_of(str(folder), created, table.rows, filters)
    # One above the other, each the page's full width: side by side at 1280 px the importance title was
    # cut off and the parallel plot's axes too close for their value labels.
    plotly_basic.chart(st, charts.importance(imp), "chart_importance")
    top = list(imp["gene"][:8]) if not imp.empty else table.genes[:8]
    plotly_basic.chart(st, parallel_chart.parallel(par, top), "chart_parallel")
    st.caption(I.parallel_caption(par, fitted) + " Each line is one genome, coloured by fitness (in "
                  f"{parallel_chart.PARALLEL_BANDS} bands; the fittest on top); hover a dot on the fitness axis for its "
                  "genes. The plot follows the filter above: narrow it there to isolate genes or values.")
