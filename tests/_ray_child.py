"""Run in a child process by tests/test_serving_ray.py: a local 2-node Ray cluster
(ray.cluster_utils.Cluster, as Ray's own tests do), actors calling tf_autopar.enable(), their
shares printed as one JSON line. argv: LEASE_DIR."""
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
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "affinity": sorted(os.sched_getaffinity(0)), "share": p.share,
                "planned": f"{p.planned_inter}x{p.planned_intra}", "omp": os.environ.get("OMP_NUM_THREADS")}


def main() -> None:
    lease = sys.argv[1]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"first": 4}})
    cluster.add_node(num_cpus=1, resources={"second": 4})
    try:
        ray.init(address=cluster.address, runtime_env={"env_vars": {
            "PYTHONPATH": ROOT, "TF_AUTOPAR_LEASE_DIR": lease, "TF_CPP_MIN_LOG_LEVEL": "2"}})
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
