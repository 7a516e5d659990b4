"""Model graph analysis: heavy operators, depth and width (see width.py, heavy_ops.py).

``analyze(obj)`` accepts a tf.Graph, GraphDef, MetaGraphDef, tf.function with an input
signature, ConcreteFunction, Keras 3 model, SavedModel directory (read without starting
TensorFlow's runtime), a graph file path or a registered model name (named.py: importing
``tf_autopar_workloads`` registers the bundled workloads; the library never imports them).
Importing this package does not import TensorFlow.
"""
from __future__ import annotations

from tf_autopar.graph.analysis import analyze_function, analyze_graph_def
from tf_autopar.graph.loaders import SUPPORTED, analyze, read_saved_model
from tf_autopar.graph.profile import GraphProfile

__all__ = ["GraphProfile", "SUPPORTED", "analyze", "analyze_function", "analyze_graph_def", "read_saved_model"]
