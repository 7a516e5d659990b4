"""A served function's state: what its request path (served.py), the builder, live trials,
memory across starts and the report share, with the few acts they all need (answer the
original way, keep a bucket on it). Below all of them, so that each names it without a circle."""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import watch
from tf_autopar.runtime.fastpath import engines
from tf_autopar.runtime.fastpath.bucket import Bucket, bucket_words
from tf_autopar.runtime.fastpath.routing.arrays import Feed
from tf_autopar.runtime.fastpath.switches import BY_LIVE
from tf_autopar.runtime.safety import warn_once

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Key, Runner
    from tf_autopar.runtime.fastpath.routing.base import Convention
    from tf_autopar.runtime.frozen import FrozenGraph

log = logging.getLogger("tf_autopar.runtime")


class Function:
    """One routed function: its buckets, their runners, what it froze, why it stopped."""

    def __init__(self, target: Any, name: str, convention: Convention, model: str, fingerprint: str | None) -> None:
        self.name, self.model, self.fingerprint = name, model, fingerprint
        self.convention, self.kind = convention, convention.kind
        # its own class, also when another served function of it swapped the class already
        self.original_class = getattr(type(target), "_tf_autopar_original", type(target))
        self._concrete, self.specs, self.arg_structure = convention.inputs(target)
        self.keras_form = "single"  # how a Keras model's predict calls give their inputs
        self.feeds = [Feed(spec) for _, spec in self.specs]
        self._target = weakref.ref(target)
        self.engine = engines.get()
        self.by = BY_LIVE  # who its tuning is recorded as (roster.tune_as)
        self.lock = threading.Lock()
        self.calls: collections.Counter[int] = collections.Counter()  # calls taken, by batch bucket
        self.declined: collections.Counter[str] = collections.Counter()  # calls not taken, by reason (reasons.py)
        self.warned: set[str] = set()  # the reasons said once already
        self.buckets: dict[int, Bucket] = {}
        self.watch = watch.Watch()
        self.frozen: FrozenGraph | None = None
        self.frozen_generation = -1
        self.pools: dict[Key, Runner] = {}  # the engine runners, by setting; shared by buckets
        self.max_width = 1
        self.variable_bytes = 0
        self.stopped = ""  # why the whole function stays on the original path
        self.refused = ""  # why the last session asked for was not opened (the memory rule, an engine's failure)
        self.engine_failed: dict[str, str] = {}  # engines that could not run this graph: not tried again

    def original(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call as it would have run without us."""
        return self.convention.original(self, target, args, kwargs)

    def keep_original(self, b: Bucket, reason: str, warn: bool = True) -> None:
        """The bucket stays on the original path, for ``reason`` (a warning, or with ``warn=False`` a log line)."""
        with self.lock:
            b.keep_original(reason)
        if warn:
            warn_once(
                f"fast-path:{self.model}:{self.name}",
                f"tf_autopar: {self.name} of {self.model} stays on TensorFlow's usual path: {reason}",
            )
        else:
            log.info(
                "tf_autopar: %s of %s stays on the original path for batch %s: %s",
                self.name,
                self.model,
                bucket_words(b.bucket),
                reason,
            )

    @property
    def concrete(self) -> Any:
        """Its concrete function; a Keras model's inference call is traced at first use (builder thread)."""
        if self._concrete is None:
            target = self._target()
            if target is None:
                raise RuntimeError("the model was collected")
            self._concrete = self.convention.trace(target)
        return self._concrete

    def target(self) -> Any:
        """The routed object, or None once collected."""
        return self._target()
