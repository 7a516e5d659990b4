"""The example app (examples/serving/app.py) with the model call left out: bench_http.py's HTTP ceiling.

Every request does what the real app does but run the model: the same FastAPI route, the body
parsed and its tensors decoded against the signature, the outputs (one real call's, made at
start and kept) turned into JSON. Served by the same gunicorn command at the same worker count and
quota, it measures what the HTTP path alone costs per request on this host, so a row's ceiling can
charge each request the HTTP cost it really has at that worker count (four workers on two cores
pay more per connection than one worker on a core of its own) instead of the solo run's.
Run without ``enable()`` (``TF_AUTOPAR_EXAMPLE_DEFAULT=1``, set by bench_http.py): nothing here
runs TensorFlow on a request, so the scheduler is free to place the workers.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from examples.serving import app as real

OUTPUTS: dict[str, Any] = {}


app = FastAPI(lifespan=real.lifespan)  # the model loaded in each worker, as the real app does


@app.post("/predict")
async def predict(body: real.PredictRequest) -> dict[str, Any]:
    inputs = real._inputs(body)
    if not OUTPUTS:  # the first request's outputs, kept: later requests only serialize them
        OUTPUTS.update({k: v.numpy() for k, v in real.SERVED["serve"](**inputs).items()})
    return {"outputs": {k: v.tolist() for k, v in OUTPUTS.items()}}


app.get("/status")(real.status)
