"""The evaluation record: what one candidate's evaluation found, and the statuses it can end in."""
from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields

STATUSES = ("ok", "compile_error", "resource_exceeded", "wrong_result", "crashed", "timeout", "unstable", "suspect")
LETHAL = frozenset(STATUSES) - {"ok"}
COMPILE_LOG_LINES = 12


def measure(unit: str, about: str, column: str | None = None, *, sandbox: bool = False, default=None):
    """A field of :class:`Evaluation` that carries its own unit and description.

    ``column``: its DuckDB type in the store's individuals table (None: not stored there);
    ``sandbox``: measured by the sandbox and copied from its reply by the evaluator.
    """
    factory = {"default_factory": default} if callable(default) else {"default": default}
    if default is MISSING:  # a field every record must be given
        factory = {}
    return field(metadata={"unit": unit, "about": about, "column": column, "sandbox": sandbox}, **factory)


@dataclass
class Evaluation:
    """One candidate's measurements: the one declaration of what a measurement is.

    Every field says its unit, what it means and where it is stored (:func:`measure`); the
    evaluator's copy of the sandbox's reply (:data:`SANDBOX_MEASURES`), the measures kept in memory
    and the rows the worker stores (``core/run/rows.py``), the exported report and the check report
    are derived from it, and a test holds the store's individuals columns to it. See
    docs/CONTRACTS.md, "Evaluation". Measurements are None when the candidate died before them.
    """

    genome_hash: str = measure("", "the genome's hash (the kernel's source hash for a twin)", default=MISSING)
    status: str = measure("", "ok or the lethal status it died with (STATUSES)", "VARCHAR", default=MISSING)
    cause: str = measure("", "why it died, one line", "VARCHAR", default="")
    time_us: float | None = measure("us", "median of the timed launches, scaled to the run's first device",
                                    "DOUBLE", sandbox=True)
    time_spread_us: float | None = measure("us", "interquartile range of the timed launches", "DOUBLE", sandbox=True)
    memory_bytes: int | None = measure("B", "io bytes + extra_bytes", "BIGINT", sandbox=True)
    extra_bytes: int | None = measure("B", "workspace beyond inputs and outputs, measured or declared (the larger); "
                                      "repacked weights included", "BIGINT", sandbox=True)
    onchip_bytes: int | None = measure("B", "registers x threads x 4 + shared memory per block (shown, not added)",
                                       "BIGINT", sandbox=True)
    stability: float = measure("", "mean of determinism, steadiness and error_margin", "DOUBLE", sandbox=True,
                               default=0.0)
    determinism: float | None = measure("", "share of repeated launches bit-identical to the first", "DOUBLE",
                                        sandbox=True)
    steadiness: float | None = measure("", "1 - timing IQR / median", "DOUBLE", sandbox=True)
    error_margin: float | None = measure("", "1 - the largest share of its tolerance any element used", "DOUBLE",
                                         sandbox=True)
    max_abs_err: float | None = measure("", "largest absolute error against the float64 reference", "DOUBLE",
                                        sandbox=True)
    rel_err: float | None = measure("", "largest relative error against the float64 reference", "DOUBLE", sandbox=True)
    source_hash: str = measure("", "hash of the rendered source (the compile cache's key)", "VARCHAR", default="")
    compile_s: float = measure("s", "compile time", "DOUBLE", default=0.0)
    eval_s: float = measure("s", "evaluation time in the sandbox", "DOUBLE", default=0.0)
    resources: dict = measure("", "static and compiled resource use (registers, shared memory...)", "JSON", default=dict)
    source: str | None = measure("", "the kernel's source (stored once per kernel, in the kernels table)")
    entry: str = measure("", "the kernel's entry point", default="")
    flags: list = measure("", "compiler flags", default=list)
    launch: dict = measure("", "template-level launch parameters", default=dict)
    compile_log: str = measure("", "the first lines of the compiler's log", default="")
    shape_errors: list = measure("", 'the worst error on each verification shape: [{"shape", "max_abs_err", "rel_err", '
                                 '"margin_used"}]', "VARCHAR", default=list)
    phases: dict = measure("s", "seconds per phase: compile, load, verification, timing, stability, memory, and "
                           "repack (spent within verification, timing and stability)", "VARCHAR", default=dict)
    device: str = measure("", 'the slot that measured it ("cuda:1", "c:0")', "VARCHAR", default="")
    device_time_us: float | None = measure("us", "its time on that device", "DOUBLE")
    same_code_as: str = measure("", "the source hash of a twin measured before: same machine code and launch",
                                default="")
    repack_us: float | None = measure("us", "the template's one-time repack of the weights into its own layout, "
                                      "timed apart from time_us (None: the canonical layout)", "DOUBLE", sandbox=True)
    speedup: float | None = measure("x", "the median over interleaved (baseline, kernel) pairs of the primary "
                                    "baseline's time / this kernel's time, timed side by side (the time term; the "
                                    "median of every re-measurement's once re-timed)", "DOUBLE", sandbox=True)
    speedup_spread: float | None = measure("x", "interquartile range of those pair ratios (of the re-measurements' "
                                           "speed-ups once re-timed)", "DOUBLE", sandbox=True)
    speedup_samples: list = measure("x", "every speed-up measured for this genome in the run, oldest first",
                                    "VARCHAR", default=list)
    noisy: bool | None = measure("", "the pair ratios spread more than 10% of their median: the speed-up is not "
                                 "to be trusted to better than that", "BOOLEAN", sandbox=True)
    pair_baseline: str | None = measure("", "the baseline it was timed beside (the fastest that verified)", "VARCHAR",
                                        sandbox=True)
    pair_baseline_us: float | None = measure("us", "median of that baseline's launches in the pairs", "DOUBLE",
                                             sandbox=True)
    cache: str | None = measure("", "cache policy of the timed launches: cold (inputs and weights from memory) or "
                                "hot", "VARCHAR", sandbox=True)
    timing_method: str | None = measure("", "how launches were timed: events, graph (CUDA graphs) or wall (CPU)",
                                        "VARCHAR", sandbox=True)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def lethal(self) -> bool:
        return self.status in LETHAL

    def to_dict(self) -> dict:
        return asdict(self)

    def copy(self, **changes) -> "Evaluation":
        """An independent copy (its dicts and lists too) with ``changes`` applied."""
        return Evaluation(**{**self.__dict__, "resources": dict(self.resources), "flags": list(self.flags),
                             "launch": dict(self.launch), "shape_errors": [dict(e) for e in self.shape_errors],
                             "phases": dict(self.phases), "speedup_samples": list(self.speedup_samples), **changes})


SANDBOX_MEASURES: tuple[str, ...] = tuple(f.name for f in fields(Evaluation) if f.metadata["sandbox"])
STORED_COLUMNS: dict[str, str] = {f.name: f.metadata["column"] for f in fields(Evaluation) if f.metadata["column"]}


def describe(name: str) -> tuple[str, str]:
    """(unit, description) of the :class:`Evaluation` field ``name``."""
    meta = next(f.metadata for f in fields(Evaluation) if f.name == name)
    return meta["unit"], meta["about"]


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def trim_log(log: str) -> str:
    """The first non-empty lines of a compiler log."""
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:COMPILE_LOG_LINES])


def first_error_line(log: str) -> str:
    """The most telling line of a compiler log: the first one that says "error"."""
    lines = log.splitlines() or [""]
    for ln in lines:
        if "error" in ln.lower():
            return ln.strip()
    return lines[0].strip()
