"""A model's graph analysed in a child process: building a model here would start TensorFlow's
runtime and fix the pools of the process that asked (enable() before its first TF op).

Child function: ``analyze(["TARGET", OPTIONS_JSON, PRELOAD_JSON])`` -> ``GraphProfile.to_dict()``;
``PRELOAD_JSON`` names modules to import first (the providers of registered model names).
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Mapping, Sequence

from tf_autopar.graph import analyze as analyze_graph
from tf_autopar.measure.child import command

TARGET = "tf_autopar.measure.analysis:analyze"


def analyze(args: list[str]) -> dict[str, Any]:
    target, options, preload = args[0], json.loads(args[1]), json.loads(args[2])
    for module in preload:
        importlib.import_module(module)
    return analyze_graph(target, **options).to_dict()


def analysis_command(target: str, options: Mapping[str, Any], preload: Sequence[str] = ()) -> list[str]:
    """The command line of the child that analyses ``target`` with ``analyze(**options)``."""
    return command(TARGET, [target, json.dumps(dict(options)), json.dumps(list(preload))])
