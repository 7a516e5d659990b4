"""Measuring: a configuration run in a fresh process, and what is made of the times.

The layer under ``validate``, ``bench``, ``tune`` and ``characterize`` (which import it, never
the reverse); it knows nothing of what it runs. Modules: child (the one child entry point and
its emit/fail protocol), runner (the parent's side: environment, binding, quota group,
timeout, nothing left behind), configs (a configuration and its grammar,
``INTERxINTRA[xOMP][:btMS][:compact]``), cgroup (real CFS quota groups, v1 and v2), stats
(medians, paired ratios, geometric means), progress (the bar), search (which neighbours a tune
measures, and when it stops), live (paired trials in a serving process), analysis (a graph
analysed in a child). Importing it never imports TensorFlow.
"""
