"""Answering a kernel whose machine code was measured before (a twin): what the evaluator keeps of a
measurement to do so, small (:class:`Twin`)."""
from __future__ import annotations

import pickle

from core.backends.base import Artifact, KernelSource
from core.evaluation.record import SANDBOX_MEASURES as MEASURES, Evaluation


class Twin:
    """What :attr:`Evaluator._twins` keeps of a measurement, to answer a twin: the measured values
    only, pickled into one bytes object (the shape errors too, so nothing of the sandbox's reply
    stays referenced). A twin's source, entry, flags, launch, resources and compile log are its own
    (its :class:`KernelSource` and :class:`Artifact`), so none of the measured source's are kept.
    Issue 10: full copies of the Evaluation held ~2.7 kB an entry, replies included; this ~0.6 kB."""

    __slots__ = ("source_hash", "measured", "users")
    FIELDS = ("status", "cause", *MEASURES, "eval_s", "device", "device_time_us", "shape_errors")  # the rest: the twin's own

    def __init__(self, ev: Evaluation, users: tuple[str, ...]):
        self.source_hash = ev.source_hash
        self.measured = pickle.dumps(tuple(getattr(ev, name) for name in self.FIELDS), pickle.HIGHEST_PROTOCOL)
        self.users = users  # the source hashes that had it, measured or answered (a tuple: most have one)

    def answer(self, key: str, kernel: KernelSource, artifact: Artifact, compile_s: float) -> Evaluation:
        """The measurement as the evaluation of the twin ``kernel`` (cache key ``key``): complete, as
        :meth:`Evaluator._measure` would make it, but measured by ``same_code_as``."""
        return Evaluation(genome_hash=key, source_hash=key, compile_s=compile_s, source=kernel.source,
                          entry=kernel.entry, flags=list(kernel.flags), launch=dict(kernel.launch),
                          resources={**kernel.resources, **artifact.resources}, compile_log=artifact.log,
                          phases={"compile": compile_s}, same_code_as=self.source_hash,
                          **dict(zip(self.FIELDS, pickle.loads(self.measured))))
