"""The fitness objectives, as data: what each one measures and how it is normalised.

The seed adds ``1/time`` and ``1/bytes`` raw, which mixes units so its weights mean nothing. Here
each objective's *term* is a ratio against the library baseline measured in the same process
(:mod:`core.search.retiming`), so that larger is always better and 1.0 means "as good as the library":

* time      = baseline time / candidate time     (1.0 = as fast as the library, 2.0 = twice as fast), the
  median of the ratios of interleaved (baseline, candidate) pairs timed side by side (``speedup``)
* memory    = baseline bytes / candidate bytes   (1.0 = same footprint as the library)
* stability = the mean of determinism (repeated launches bit-identical to the first), steadiness
  (1 - timing IQR / median) and error margin (tolerance left unused), in [0, 1]

``fitness = sum(w_o * term_o) / sum(w_o)`` over the objectives of the run's weights (see
:mod:`core.search.fitness`); a lethal candidate has fitness 0. Raw measurements are always stored beside
the terms, and the Pareto ranking uses the raw measurements, each turned into "smaller is better"
by its :attr:`Objective.direction`.

The time term is the candidate's paired speed-up (:func:`core.evaluation.timing.paired_times`): the
sandbox times it in interleaved chunks with the primary baseline, and the median of the per-pair
ratios is the term, so load that comes and goes on a busy machine moves both sides of each ratio and
cancels (on our 2-core VM a numpy baseline ranged from 265 us to 68 ms across generations, and a
ratio of medians taken at different moments stored a fitness of 106 for a kernel 1.7x numpy).
Measures without a speed-up (records from before paired timing) fall back to the run-level
``reference`` -- the median of the baseline times of every generation so far, this one's included --
not the generation's own baseline time: fitness is compared across generations (the run's champion is its fittest kernel), and a
noisy generation whose baseline happened to be slow (45 vs 104 µs on an H200) would otherwise
inflate the fitness of every kernel first measured in it. A ratio objective uses
``baseline["reference"][measure]`` when the reference has that measure and ``baseline[measure]``
otherwise (memory; runs and records from before the reference).

Adding an objective means adding one entry to :data:`OBJECTIVES`: the CLI, the launch form, the
stored ``<name>_term`` columns and the Pareto matrix all iterate over it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

DIRECTIONS = ("minimize", "maximize")


@dataclass(frozen=True)
class Objective:
    """One fitness objective.

    ``measure`` is the key of the raw measurement in an evaluation (and in the baseline record for
    ratio objectives); ``direction`` says whether smaller (``minimize``) or larger (``maximize``)
    raw values are better.
    """

    name: str
    label: str
    measure: str
    direction: str
    default_weight: float
    help: str
    #: the key of a ratio measured in pairs with the baseline (baseline / value, timed side by side), which
    #: is the term whenever a measure has it: the reference's ratio of medians taken at other moments is
    #: only for measures without it (records from before paired timing)
    paired: str | None = None

    def term(self, measure: Mapping, baseline: Mapping) -> float:
        """The normalised term of one candidate: larger is better, 1.0 = the baseline's value.

        A ``minimize`` objective is ``baseline / value``, the baseline being the run-level
        ``reference`` when it has this measure (see the module docstring); a ``maximize`` one is
        taken as it is (it is already a fraction in [0, 1], such as stability).
        """
        if self.paired:
            ratio = measure.get(self.paired)
            if ratio is not None and ratio == ratio:  # timed beside its baseline: that ratio is the term
                return float(ratio)
        value = float(measure[self.measure])
        if self.direction == "minimize":
            return self.reference(baseline) / value
        return value

    def reference(self, baseline: Mapping) -> float:
        """The value a ``minimize`` term divides: ``baseline["reference"][measure]`` when present,
        else ``baseline[measure]``."""
        ref = baseline.get("reference")
        if isinstance(ref, Mapping) and ref.get(self.measure) is not None:
            return float(ref[self.measure])
        return float(baseline[self.measure])

    def minimised(self, measure: Mapping) -> float:
        """The raw measurement turned into "smaller is better" (for Pareto ranking)."""
        value = float(measure[self.measure])
        return value if self.direction == "minimize" else -value

    @property
    def column(self) -> str:
        """The individuals column that stores this objective's term."""
        return f"{self.name}_term"


OBJECTIVES: tuple[Objective, ...] = (
    Objective("time", "Time", "time_us", "minimize", 0.6,
              "fitness weight of speed (baseline time / time, timed in interleaved pairs)", paired="speedup"),
    Objective("memory", "Memory", "memory_bytes", "minimize", 0.3,
              "fitness weight of memory (baseline bytes / bytes)"),
    Objective("stability", "Stability", "stability", "maximize", 0.1,
              "fitness weight of stability (determinism, steady timing and error margin)"),
)
NAMES: tuple[str, ...] = tuple(o.name for o in OBJECTIVES)
_BY_NAME = {o.name: o for o in OBJECTIVES}


def objective(name: str) -> Objective:
    """The objective called ``name``; KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown objective {name!r} (choose from: {', '.join(NAMES)})") from None


def default_weights() -> dict[str, float]:
    """Objective name -> its default weight (the seed's 0.6 / 0.3 / 0.1)."""
    return {o.name: o.default_weight for o in OBJECTIVES}
