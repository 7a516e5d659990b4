"""A FastAPI app serving a SavedModel: ``POST /predict`` (JSON in, JSON out), ``GET /status``.

    TF_AUTOPAR_EXAMPLE_MODEL=/models/my_model/1 \\
        gunicorn -w 2 -k uvicorn.workers.UvicornWorker -b 127.0.0.1:8000 examples.serving.app:app
    TF_AUTOPAR_EXAMPLE_MODEL=/models/my_model/1 uvicorn --workers 2 examples.serving.app:app

``tf_autopar.enable()`` is the first thing the module does: each worker plans for its own share
of the host (disjoint CPUs, no count needed) before TensorFlow starts. The model is loaded in the
app's lifespan, inside the worker, never at import: with ``gunicorn --preload`` the import runs in
the master, and a master that started TensorFlow's runtime before forking would leave every worker
with its pools (they cannot change in a forked child). ``TF_AUTOPAR_EXAMPLE_DEFAULT=1`` skips
``enable()`` (TensorFlow's defaults, for A/B runs).

Request body: ``{"inputs": {"name": [[...], ...]}}``, one entry per input of the serving signature
(nested lists, batch first, or a raw tensor: tensors.py); ``{"inputs": [[...]]}`` for a one-input signature. Response:
``{"outputs": {"name": [...]}}``.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any

if os.environ.get("TF_AUTOPAR_EXAMPLE_DEFAULT", "") not in ("1", "true", "yes"):
    import tf_autopar

    tf_autopar.enable()
else:
    tf_autopar = None  # type: ignore[assignment]

import numpy as np
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from examples.serving.tensors import decode_inputs

MODEL_VAR = "TF_AUTOPAR_EXAMPLE_MODEL"
SERVED: dict[str, Any] = {}


class PredictRequest(BaseModel):
    inputs: dict[str, Any] | list[Any]


def _model_path() -> str:
    path = os.environ.get(MODEL_VAR, "")
    if not path or not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise RuntimeError(f"{MODEL_VAR} must name a SavedModel directory (with saved_model.pb); got {path!r}")
    return path


@asynccontextmanager
async def lifespan(app: FastAPI):  # runs in each worker, after the fork
    import tensorflow as tf

    model = tf.saved_model.load(_model_path())
    serve = model.signatures["serving_default"]
    specs = serve.structured_input_signature[1]
    SERVED.update(model=model, serve=serve, specs={k: v.dtype.as_numpy_dtype for k, v in specs.items()})
    yield
    SERVED.clear()


app = FastAPI(lifespan=lifespan)


def _inputs(body: PredictRequest) -> dict[str, np.ndarray]:
    try:
        return decode_inputs(body.inputs, SERVED["specs"])
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None


@app.post("/predict")
async def predict(body: PredictRequest) -> dict[str, Any]:
    # async def: one request at a time per worker, on the event loop's thread (the worker's CPUs
    # are planned for one call at a time; a sync def would run several in a thread pool).
    inputs = _inputs(body)
    try:
        out = SERVED["serve"](**inputs)
    except Exception as exc:  # shape or type the model refuses: the client's error
        raise HTTPException(422, f"the model refused the inputs: {str(exc).splitlines()[0][:300]}") from None
    return {"outputs": {k: v.numpy().tolist() for k, v in out.items()}}


@app.get("/status")
async def status() -> dict[str, Any]:
    """This worker: pid, CPUs, its share and pools, and which path serves each batch."""
    info: dict[str, Any] = {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)), "enabled": False}
    if tf_autopar is not None:
        st = tf_autopar.status()
        p = st.process
        info.update(enabled=st.enabled, warnings=list(st.warnings))
        if p is not None:
            info.update(
                share=p.share,
                planned=f"{p.planned_inter}x{p.planned_intra}",
                phase=p.phase,
                bound_cpus=list(p.bound_cpus),
            )
        info["served"] = [
            {
                "function": s.function,
                "calls": s.calls,
                "stopped": s.stopped,
                "buckets": [
                    {
                        "batch": b.batch,
                        "path": b.path,
                        "served": b.served,
                        "pools": f"{b.inter_op}x{b.intra_op}",
                        "reason": b.reason,
                        "tuning": b.tuning,
                    }
                    for b in s.buckets
                ],
            }
            for s in st.served
        ]
    return info
