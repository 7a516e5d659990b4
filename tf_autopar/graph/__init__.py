"""Model graph analysis: heavy operators, depth and width (see width.py, heavy_ops.py).

By role: sources.py (an object, file or name -> the GraphDef to read; live_graphs.py for live
TensorFlow objects, protobufs.py for files), analysis.py (``analyze`` and the profile),
reduction.py (a graph body -> heavy-op levels), work.py (one op's work, from NodeDef or live
shapes), width.py (the level algorithm), heavy_ops.py (which op types are heavy).

``analyze(obj)`` accepts a tf.Graph, GraphDef, MetaGraphDef, tf.function with an input
signature, ConcreteFunction, Keras 3 model, SavedModel directory (read without starting
TensorFlow's runtime), a graph file path or a registered model name (named.py: importing
``tf_autopar_workloads`` registers the bundled workloads; the library never imports them).
Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from tf_autopar.graph.analysis import analyze, analyze_function, analyze_graph_def
from tf_autopar.graph.protobufs import read_saved_model
from tf_autopar.graph.sources import SUPPORTED
from tf_autopar.graph.profile import GraphProfile

__all__ = ["GraphProfile", "SUPPORTED", "analyze", "analyze_function", "analyze_graph_def", "read_saved_model"]
