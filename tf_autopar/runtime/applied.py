"""What enable() changed in this process, and the one way to undo it.

On threadpoolctl's ``_ThreadpoolLimiter`` model: the object that makes a change keeps what was
there before, and ``restore()`` puts it back. Every change enable() makes goes through one
``Applied`` record: the environment variables it set, the CPU mask it bound the process to, the
attributes of TensorFlow and Keras the hooks replaced, the entries they added to lists (a trace
callback, a meta-path finder), this process's lease slot and the share it plans for, the loaded
models the fast path routed. ``restore()`` undoes them in reverse order, leaving alone what
someone else changed since (a variable the program set again, a thread it moved, a function
another library wrapped after us); a second call finds nothing left to do.

Hooks (sessions.py, functions.py, model_loads.py) implement ``Hook`` and make every patch
through the record, so disable() is ``record.restore()``. A hook whose install raises has its
own partial changes undone at once (``install``): nothing is left half-applied.

Plain classes, not dataclasses: enable() runs at every process start (docs/design.md, "Start-up
cost"). Not thread-safe by itself: callers hold ``STATE.lock``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, MutableSequence, Protocol

from tf_autopar.runtime.safety import fail_open
from tf_autopar.topology import affinity

if TYPE_CHECKING:
    from tf_autopar.coordination import Share

# kinds of change, for a partial restore (a forked worker re-plans its process settings but keeps the hooks)
ENV, AFFINITY, SHARE, HOOK, PATCH, ENTRY, CALL = "env", "affinity", "share", "hook", "patch", "entry", "call"
_ABSENT = object()  # an attribute the owner did not have in its own __dict__ (a class inheriting it)


class Hook(Protocol):
    """What a hook module offers the record: its name in status(), install, and the drop of its caches.

    ``install(record)`` makes every patch through ``record`` (``patch``, ``add``), so the record
    can undo them; ``uninstall()`` runs after they were undone and forgets what the hook learnt
    (models planned, functions seen), so that a later enable() starts afresh."""

    PATCH_NAME: str

    def install(self, record: Applied) -> None: ...

    def uninstall(self) -> None: ...


class _Step:
    """One change; ``undo()`` puts back what it replaced when nobody changed it since."""

    __slots__ = ()
    kind = ""
    what = ""

    def undo(self) -> None:
        raise NotImplementedError


class _Env(_Step):
    __slots__ = ("key", "before", "ours")
    kind = ENV

    def __init__(self, key: str, before: str | None, ours: str) -> None:
        self.key, self.before, self.ours = key, before, ours

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"put back {self.key}"

    def undo(self) -> None:
        if os.environ.get(self.key) != self.ours:
            return  # the program set it since: its value stays
        if self.before is None:
            del os.environ[self.key]
        else:
            os.environ[self.key] = self.before


class _Affinity(_Step):
    __slots__ = ("before", "ours")
    kind = AFFINITY
    what = "put back the CPU affinity"

    def __init__(self, before: frozenset[int], ours: frozenset[int]) -> None:
        self.before, self.ours = before, ours

    def undo(self) -> None:
        """Every thread still on our mask gets the mask from before; threads moved since stay."""
        for tid in affinity.threads():
            try:
                if frozenset(os.sched_getaffinity(tid)) == self.ours:
                    affinity.set_affinity(self.before, (tid,))
            except (OSError, ValueError):  # a thread that just exited, or a cpuset that shrank
                continue


class _Patch(_Step):
    __slots__ = ("owner", "name", "original", "replacement")
    kind = PATCH

    def __init__(self, owner: Any, name: str, original: Any, replacement: Any) -> None:
        self.owner, self.name, self.original, self.replacement = owner, name, original, replacement

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"put back {getattr(self.owner, '__name__', self.owner)}.{self.name}"

    def undo(self) -> None:
        if _own(self.owner, self.name) is not self.replacement:
            return  # someone replaced ours since: theirs stays (ours, inside it, passes through when disabled)
        if self.original is _ABSENT:
            delattr(self.owner, self.name)  # the class had inherited it
        else:
            setattr(self.owner, self.name, self.original)


def _own(owner: Any, name: str) -> Any:
    """``owner``'s own value for ``name``: a class's from its __dict__ (_ABSENT when inherited),
    anything else's (a module, a module wrapper) as attribute access gives it."""
    if isinstance(owner, type):
        return vars(owner).get(name, _ABSENT)
    return getattr(owner, name, _ABSENT)


class _Entry(_Step):
    __slots__ = ("container", "item", "what")
    kind = ENTRY

    def __init__(self, container: MutableSequence[Any], item: Any, what: str) -> None:
        self.container, self.item, self.what = container, item, what

    def undo(self) -> None:
        while self.item in self.container:
            self.container.remove(self.item)


class _Call(_Step):
    """An undo that another module owns the details of (the fast path's routed models)."""

    __slots__ = ("key", "fn", "what", "kind")

    def __init__(self, key: str, fn: Callable[[], Any], what: str, kind: str = CALL) -> None:
        self.key, self.fn, self.what, self.kind = key, fn, what, kind

    def undo(self) -> None:
        self.fn()


class _Slot(_Step):
    __slots__ = ("share",)
    kind = SHARE
    what = "give back the lease slot"

    def __init__(self, share: Share) -> None:
        self.share = share

    def undo(self) -> None:
        self.share.release()  # a later enable() must not count it as a peer


class _Installed(_Step):
    __slots__ = ("hook",)
    kind = HOOK

    def __init__(self, hook: Hook) -> None:
        self.hook = hook

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"remove the hook for {self.hook.PATCH_NAME}"

    def undo(self) -> None:
        self.hook.uninstall()


class Applied:
    """The record of one enable(): each change with what it replaced, undone by ``restore()``."""

    def __init__(self) -> None:
        self._steps: list[_Step] = []
        self._env: dict[str, _Env] = {}  # the ENV steps by variable, to update a variable set again

    # ------------------------------------------------------------------ environment and affinity

    def set_env(self, values: Mapping[str, str], users: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """Set each of ``values`` the user has not set (``users``: the environment as they set it);
        returns (set, kept user values). A variable set again keeps the value from before the first."""
        applied: dict[str, str] = {}
        kept: dict[str, str] = {}
        for key, value in values.items():
            if key in users:
                kept[key] = users[key]
                continue
            step = self._env.get(key)
            if step is None:
                step = self._env[key] = _Env(key, os.environ.get(key), value)  # a launcher's value is "before"
                self._steps.append(step)
            step.ours = value
            os.environ[key] = value
            applied[key] = value
        return applied, kept

    def ours(self) -> dict[str, str]:
        """The variables this record set, with the values it set (to tell them from the user's)."""
        return {key: step.ours for key, step in self._env.items()}

    def env_before(self) -> dict[str, str | None]:
        """Those variables' values before the first set (None: unset)."""
        return {key: step.before for key, step in self._env.items()}

    def bind(self, cpus: Collection[int]) -> bool:
        """Bind this process to ``cpus`` (its later threads inherit the mask); False when it
        already was, or the kernel refused. Bound again, the first mask is the one to restore."""
        try:
            before = frozenset(os.sched_getaffinity(0))
            if before == set(cpus):
                return False
            affinity.set_affinity(cpus)
        except (AttributeError, OSError, ValueError):
            return False
        step = next((s for s in self._steps if isinstance(s, _Affinity)), None)
        if step is None:
            self._steps.append(_Affinity(before, frozenset(cpus)))
        else:
            step.ours = frozenset(cpus)
        return True

    def binding(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """(mask before the first bind, mask bound), or None when never bound."""
        step = next((s for s in self._steps if isinstance(s, _Affinity)), None)
        return (step.before, step.ours) if step is not None else None

    # ------------------------------------------------------------------ the lease slot and the share

    def hold(self, share: Share) -> None:
        """``share``'s lease slot is this record's to give back."""
        self._steps.append(_Slot(share))

    @property
    def share(self) -> Share | None:
        """The share this process claimed (None: alone, or not claimed here)."""
        return next((s.share for s in reversed(self._steps) if isinstance(s, _Slot)), None)

    def recut_share(self, share: Share) -> None:
        """The held share cut again (new CPU limits, coordination/reshare.py): same lease slot."""
        for step in reversed(self._steps):
            if isinstance(step, _Slot):
                step.share = share
                return

    def forget_share(self) -> None:
        """A forked child's copy of the parent's share: not its own to give back, nor to plan for."""
        self._steps = [s for s in self._steps if not isinstance(s, _Slot)]

    # ------------------------------------------------------------------ hooks and their patches

    def install(self, hook: Hook) -> None:
        """Install ``hook``; if its install raises, what it changed so far is undone and the error raised."""
        mark = len(self._steps)
        self._steps.append(_Installed(hook))  # first: its uninstall runs after its patches are undone
        try:
            hook.install(self)
        except BaseException:
            partial, self._steps = self._steps[mark:], self._steps[:mark]
            self._forget_undone()
            self._undo(partial)
            raise

    def installed(self, hook: Hook) -> bool:
        return any(isinstance(s, _Installed) and s.hook is hook for s in self._steps)

    def hook_names(self) -> list[str]:
        """The hooks installed, in install order (status().patches)."""
        return [s.hook.PATCH_NAME for s in self._steps if isinstance(s, _Installed)]

    def patch(self, owner: Any, name: str, replacement: Any) -> Any:
        """Set ``owner.name`` to ``replacement``; returns what it replaced (the inherited value
        for a class that had none of its own)."""
        original = _own(owner, name)
        current = getattr(owner, name)
        setattr(owner, name, replacement)
        self._steps.append(_Patch(owner, name, original, replacement))
        return current

    def add(self, container: MutableSequence[Any], item: Any, what: str, index: int | None = None) -> None:
        """Add ``item`` to ``container`` (at ``index``, else at the end) until restore(); ``what``
        names the undo ("remove ...") in a warning should it fail."""
        if index is None:
            container.append(item)
        else:
            container.insert(index, item)
        self._steps.append(_Entry(container, item, what))

    def on_restore(self, key: str, fn: Callable[[], Any], what: str, kind: str = CALL) -> None:
        """Run ``fn`` at restore(), at this point of the order; once per ``key``."""
        if not any(isinstance(s, _Call) and s.key == key for s in self._steps):
            self._steps.append(_Call(key, fn, what, kind))

    # ------------------------------------------------------------------ undo

    def restore(self, kinds: Iterable[str] | None = None) -> None:
        """Undo every change (or those of ``kinds``) in reverse order. Idempotent: what is undone
        leaves the record, and an undo that raises is reported and dropped, never raised."""
        if kinds is None:
            steps, self._steps = self._steps, []
        else:
            wanted = set(kinds)
            steps = [s for s in self._steps if s.kind in wanted]
            self._steps = [s for s in self._steps if s.kind not in wanted]
        self._forget_undone()
        self._undo(steps)

    def _forget_undone(self) -> None:
        self._env = {key: s for key, s in self._env.items() if s in self._steps}

    @staticmethod
    def _undo(steps: list[_Step]) -> None:
        for step in reversed(steps):
            try:
                step.undo()
            except Exception as exc:  # one change we cannot undo must not keep the others
                fail_open(step.what, exc)

    def changes(self) -> list[str]:
        """What restore() would undo, in the order it was done (for status and tests)."""
        return [s.what for s in self._steps]

    def __repr__(self) -> str:
        return f"Applied({'; '.join(self.changes())})"
