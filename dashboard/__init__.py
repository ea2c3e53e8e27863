"""Shared helpers of the AbeBot dashboard (``app.py`` and ``pages/``).

Pages stay thin: they lay out widgets and call into these modules, which hold run discovery
(:mod:`dashboard.runs`), the Runs page's columns and actions (:mod:`dashboard.manage`), a run's name
and notes (:mod:`dashboard.meta`), launching the worker (:mod:`dashboard.launch`), data shaping
(:mod:`dashboard.data`), chart builders (:mod:`dashboard.charts`), the Monitor page's pieces
(:mod:`dashboard.live`), gene importance (:mod:`dashboard.importance`), the kernel check runner
(:mod:`dashboard.checkkernel`) and genome lineage (:mod:`dashboard.genomes`).
"""
