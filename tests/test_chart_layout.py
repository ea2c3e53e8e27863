"""Chart layout rules the browser test checks by screenshot, checked here on the figures themselves."""
from __future__ import annotations

import pandas as pd

from dashboard import charts, parallel_chart


def test_a_benchmark_time_axis_never_goes_below_zero():
    table = pd.DataFrame({"name": ["evolved champion", "numpy (primary)"], "kind": ["champion", "baseline"],
                          "time_us": [60.0, 100.0], "spread_us": [5000.0, None]})
    fig = charts.benchmark_bars(table, 2.5)
    assert fig.layout.xaxis.range[0] == 0 and fig.layout.xaxis.range[1] >= 5060
    bar = fig.data[0]
    assert list(bar.error_x.arrayminus) == [60.0, 0.0] and bar.error_x.symmetric is False


def test_legends_sit_under_the_x_axis_title_not_on_it():
    curves = pd.DataFrame({"generation": [0, 1], "best_fitness": [1.0, 1.2], "mean_fitness": [0.8, 0.9],
                           "worst_fitness": [0.1, 0.2]})
    legend = charts.fitness(curves).layout.legend
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom")


def test_parallel_value_labels_are_short_and_axis_names_stay_level():
    frame = pd.DataFrame({"gene.a": ['["SYNC","LDG","FFMA"]', '["STG","LDG"]'] * 3, "gene.b": ["1", "2"] * 3,
                          "fitness": [0.5, 1.0, 0.7, 0.9, 0.6, 0.8]})
    fig = parallel_chart.parallel(frame, ["gene.a", "gene.b"])
    labels = next(t for t in fig.data if t.name == "values").text
    assert max(len(t) for t in labels) <= parallel_chart.PARALLEL_LABEL_CHARS
    assert fig.layout.xaxis.tickangle == 0
