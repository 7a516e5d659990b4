"""The example app (examples/serving/app.py) plus ``GET /builds``: when this worker's fast path
held its memory cgroup's build lock (runtime/fastpath/memory.py ``held``: what, taken, released,
``time.time()``), so that bench_memory.py ``--gunicorn`` can show that two workers under one pod
limit never built at once. Everything else is the example app's, served by the same gunicorn
command; with ``TF_AUTOPAR_EXAMPLE_DEFAULT=1`` (TensorFlow's default path) the list is empty.
"""

from __future__ import annotations

import os
from typing import Any

from examples.serving import app as real

app = real.app


@app.get("/builds")
async def builds() -> dict[str, Any]:
    if real.tf_autopar is None:
        return {"pid": os.getpid(), "builds": []}
    from tf_autopar.runtime.fastpath import memory

    return {"pid": os.getpid(), "builds": [list(x) for x in memory.held]}
