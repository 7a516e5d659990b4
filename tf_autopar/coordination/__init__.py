"""Cooperative planning for several TensorFlow processes on one host, without the launcher.

The package's face: it re-exports the public names and holds no logic. The modules:

- claim.py: ``claim_share(topology)``, the worker's share of the host: small readers tried in
  order, first match wins (placed, ranks, a Ray grant, a count, the rendezvous).
- share.py: ``Share``, how one is built from a slice or the whole mask, ``apply_affinity``.
- reshare.py: a share cut again when the host's CPU limits change at run time.
- ranks.py: which worker of how many, from what a launcher put in the environment.
- lease.py: the host-wide lease: each worker's slot, held by a lock, released at exit.
- rendezvous.py: workers started together without a count find each other.
- ray_grant.py: the CPUs Ray granted a worker, and the share they make.
- slices.py: the host's usable cores cut into one slice per worker; the sharing rule.
"""

from __future__ import annotations

from tf_autopar.coordination.claim import claim_share
from tf_autopar.coordination.lease import LeaseError, lease_status
from tf_autopar.coordination.ranks import Ranks, detect_ranks
from tf_autopar.coordination.share import Share, apply_affinity
from tf_autopar.coordination.slices import Slice, restrict, split

__all__ = [
    "LeaseError",
    "Ranks",
    "Share",
    "Slice",
    "apply_affinity",
    "claim_share",
    "detect_ranks",
    "lease_status",
    "restrict",
    "split",
]
