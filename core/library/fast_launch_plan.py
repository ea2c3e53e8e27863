"""An op's eager fast path: per call signature, the one callable that launches its kernel.

:mod:`core.library.ops` keys each eager call by what decides its launch (the op, the activations'
shape, dtype and device, the weights' addresses) and keeps, per key, a :class:`Plan` made after the
first call of that key has gone through the dispatcher (:meth:`Dispatcher.run
<core.library.dispatcher.Dispatcher.run>`): the dispatcher's call counter for it and the launch
callable with the call's tensors as its sources. A later call of the key allocates its output and
makes one call: the compiled launcher writes the tensors' addresses and calls ``cuLaunchKernel``
(:func:`core.library.launch.caller`). No dictionary of the workload's names, no problem dict, no
signature tuple is built per call.

A key whose call the dispatcher ran natively, or whose launcher cannot take new pointers (Triton's,
a template's derived pointer), has no plan: its calls take the dispatcher path every time.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from core.library.launch import caller

MAX_PLANS = 4096  # plans kept (all dropped when exceeded: a model has a few dozen call shapes)


class Plan:
    """``count`` is the dispatcher's resolution slot (item 0 counts calls); ``call(*tensors)``
    launches on the tensors in the op's order; ``like`` is a tensor shaped like the output where the
    op cannot allocate it like an input (``torch.empty_like(plan.like)`` costs less than
    ``x.new_empty(shape)``), else None; ``keep``
    holds what must outlive the plan (the weights whose addresses its key holds)."""

    __slots__ = ("count", "call", "like", "keep")

    def __init__(self, count: list, call: Callable[..., None], like: Any = None, keep: tuple = ()):
        self.count, self.call, self.like, self.keep = count, call, like, keep


def make_plan(dispatcher: Any, op: str, problem: dict, tensors: dict, kind: str, index: int,
              order: Sequence[str], sources: Sequence[Any], checked: Sequence[str],
              like: Any = None) -> Plan | None:
    """The plan for calls like the one :meth:`Dispatcher.run` just served: ``order`` names the
    tensors the op will pass per call (the workload's names; ``sources`` are this call's), ``checked``
    those whose dtype and device the launch checks per call (the ones the op's key does not fix).
    None where the call has no launcher to call directly, or where the launcher reads a tensor that
    is not among ``order`` (its address would be stale)."""
    found = dispatcher.bound(op, problem, tensors, kind, index)
    if found is None:
        return None
    slot, bound = found
    where = {name: i for i, name in enumerate(order)}
    if any(n not in where for _launch, _positions, names in bound.slots for n in names):
        return None
    dtypes = [s.dtype if n in checked else None for n, s in zip(order, sources)]
    devices = [s.get_device() if n in checked else None for n, s in zip(order, sources)]
    if len(bound.slots) == 1 and bound.fn is bound.slots[0][0]:
        launch, positions, names = bound.slots[0]
        slots = [tuple(p for p, n in zip(positions, names) if n == name) for name in order]
        return Plan(slot, caller(launch, slots, order, dtypes, devices), like)
    sets = [(launch, positions, tuple(where[n] for n in names)) for launch, positions, names in bound.slots]
    return Plan(slot, _Sequence(sets, bound.fn, tuple(order), dtypes, devices), like)


class _Sequence:
    """A plan's call where the bound launcher is more than one launch (or not a launch itself):
    every launch's pointers are set, then the launcher runs."""

    def __init__(self, sets: list, fn: Callable[[], Any], order: tuple, dtypes: list, devices: list):
        self.sets, self.fn, self.order = sets, fn, order
        self.checks = [(order[i], dtypes[i], devices[i]) for i in range(len(order))
                       if dtypes[i] is not None or devices[i] is not None]

    def __call__(self, *sources: Any) -> None:
        from core.library.launch import LaunchArgumentError, _check

        if len(sources) != len(self.order):
            raise LaunchArgumentError(f"this launch takes {len(self.order)} sources {self.order}, got {len(sources)}")
        for name, dtype, device in self.checks:
            _check(name, sources[self.order.index(name)], dtype, device)
        for launch, positions, which in self.sets:
            launch.update(positions, [sources[i].data_ptr() for i in which])
        self.fn()


def remember(plans: dict, key: tuple, plan: Plan | None) -> None:
    """Keep ``plan`` (None: the key's calls take the dispatcher path) under ``key``."""
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = plan
