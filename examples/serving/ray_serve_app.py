"""A Ray Serve deployment serving a SavedModel, ``tf_autopar.enable()`` in each replica.

    serve run examples.serving.ray_serve_app:build model=/models/my_model/1 num_cpus=1 replicas=2

Each replica plans for the CPUs Ray granted it (``ray_actor_options={"num_cpus": ...}``, read
from Ray's runtime context), and the replicas on one host take disjoint cores. Ray binds nothing
itself and stock TensorFlow ignores the ``OMP_NUM_THREADS`` Ray sets, so without ``enable()``
every replica sizes its pools for the whole host. ``default=1`` skips ``enable()`` (A/B runs).
Request and response bodies are the FastAPI example's (app.py): ``{"inputs": ...}`` in,
``{"outputs": ...}`` out, ``POST /predict``.
"""

from __future__ import annotations

import os
from typing import Any

from ray import serve
from starlette.requests import Request

from examples.serving.tensors import decode_inputs


@serve.deployment
class SavedModelServer:
    def __init__(self, model: str, default: bool = False) -> None:
        self.enabled = not default
        if self.enabled:
            import tf_autopar

            tf_autopar.enable()  # in the replica's own process, before its first TensorFlow op
        import tensorflow as tf

        self.serve = tf.saved_model.load(model).signatures["serving_default"]
        self.specs = {k: v.dtype.as_numpy_dtype for k, v in self.serve.structured_input_signature[1].items()}

    async def __call__(self, request: Request) -> Any:
        if request.url.path.rstrip("/").endswith("status"):
            return self.status()
        body = await request.json()
        out = self.serve(**decode_inputs(body["inputs"], self.specs))
        return {"outputs": {k: v.numpy().tolist() for k, v in out.items()}}

    def status(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "affinity": sorted(os.sched_getaffinity(0)),
            "enabled": self.enabled,
        }
        if self.enabled:
            import tf_autopar

            st = tf_autopar.status()
            if st.process is not None:
                info.update(share=st.process.share, planned=f"{st.process.planned_inter}x{st.process.planned_intra}")
            info["served"] = [
                {"function": s.function, "buckets": [{"batch": b.batch, "path": b.path} for b in s.buckets]}
                for s in st.served
            ]
        return info


def build(args: dict[str, str]) -> Any:
    """``serve run ...:build model=PATH [num_cpus=1] [replicas=2] [default=1]``."""
    if "model" not in args:
        raise ValueError("give the SavedModel: serve run examples.serving.ray_serve_app:build model=/path/to/model")
    num_cpus, replicas = float(args.get("num_cpus", 1)), int(args.get("replicas", 2))
    return SavedModelServer.options(num_replicas=replicas, ray_actor_options={"num_cpus": num_cpus}).bind(
        args["model"], default=args.get("default", "") in ("1", "true", "yes")
    )
