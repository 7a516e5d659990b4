"""Run in a child process by tests/test_serving_ray.py: a local 2-node Ray cluster
(ray.cluster_utils.Cluster, as Ray's own tests do), actors calling tf_autopar.enable(), their
shares printed as one JSON line. argv: LEASE_DIR [serve MODEL]: with "serve", the Ray Serve example
(examples/serving/ray_serve_app.py) with 2 replicas of num_cpus=0.5 per node, asked over HTTP."""

from __future__ import annotations

import json
import os
import sys

import ray
from ray.cluster_utils import Cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@ray.remote
class Replica:
    def share(self) -> dict:
        import tf_autopar

        st = tf_autopar.enable()
        p = st.process
        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "affinity": sorted(os.sched_getaffinity(0)),
            "share": p.share,
            "planned": f"{p.planned_inter}x{p.planned_intra}",
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }


def serve_example(model: str) -> dict:
    """The Ray Serve example on 2 nodes of 1 CPU: 4 replicas of num_cpus=0.5, their /status."""
    import http.client

    from ray import serve

    sys.path.insert(0, ROOT)
    from examples.serving.harness import free_port
    from examples.serving.ray_serve_app import SavedModelServer

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        SavedModelServer.options(num_replicas=4, ray_actor_options={"num_cpus": 0.5}).bind(model),
        route_prefix="/predict",
    )
    seen: dict[int, dict] = {}
    for _ in range(200):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/predict/status", "{}", {"Content-Type": "application/json"})
        st = json.loads(conn.getresponse().read())
        conn.close()
        seen[st["pid"]] = st
        if len(seen) == 4:
            break
    serve.shutdown()
    return {"replicas": list(seen.values())}


def main() -> None:
    lease = sys.argv[1]
    if sys.argv[2:3] == ["serve"]:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        cluster.add_node(num_cpus=1)
        try:
            ray.init(
                address=cluster.address,
                runtime_env={
                    "env_vars": {"PYTHONPATH": ROOT, "TF_AUTOPAR_LEASE_DIR": lease, "TF_CPP_MIN_LOG_LEVEL": "2"}
                },
            )
            cluster.wait_for_nodes()
            print("RESULT " + json.dumps(serve_example(sys.argv[3])), flush=True)
        finally:
            ray.shutdown()
            cluster.shutdown()
        return
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"first": 4}})
    cluster.add_node(num_cpus=1, resources={"second": 4})
    try:
        ray.init(
            address=cluster.address,
            runtime_env={"env_vars": {"PYTHONPATH": ROOT, "TF_AUTOPAR_LEASE_DIR": lease, "TF_CPP_MIN_LOG_LEVEL": "2"}},
        )
        cluster.wait_for_nodes()
        whole = [Replica.options(num_cpus=1, resources={"first": 1}).remote() for _ in range(2)]
        half = [Replica.options(num_cpus=0.5, resources={"second": 1}).remote() for _ in range(2)]
        out = {"whole": ray.get([a.share.remote() for a in whole]), "half": ray.get([a.share.remote() for a in half])}
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
