"""Shared helpers of the AbeBot dashboard (``app.py`` and ``pages/``).

Pages stay thin: they lay out widgets and call into these modules, which hold run discovery
(:mod:`dashboard.runs`), launching the worker (:mod:`dashboard.launch`), data shaping
(:mod:`dashboard.data`), chart builders (:mod:`dashboard.charts`) and genome lineage
(:mod:`dashboard.genomes`).
"""
