"""Fathom's characterization of workloads (where the time goes, similarity, training vs
inference, parallel scaling) from fresh-process traces: ``classes`` (op type -> op class),
``analysis`` (pure), ``run`` (the children), ``report`` (Markdown and PNGs). Importing any of
them imports neither TensorFlow nor the workloads; ``bundled`` (``tf_autopar.characterize``) is
the entry point that knows the bundled workloads' names.
"""
