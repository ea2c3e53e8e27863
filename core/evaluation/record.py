"""The evaluation record: what one candidate's evaluation found, and the statuses it can end in."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "compile_error", "resource_exceeded", "wrong_result", "crashed", "timeout", "unstable", "suspect")
LETHAL = frozenset(STATUSES) - {"ok"}
COMPILE_LOG_LINES = 12


@dataclass
class Evaluation:
    """One candidate's measurements (see docs/CONTRACTS.md, "Evaluation").

    Times are in microseconds: ``time_us`` is the median of the timed launches and
    ``time_spread_us`` their interquartile range. ``memory_bytes`` = io bytes + ``extra_bytes``
    (workspaces, measured or declared, whichever is larger); ``onchip_bytes`` (registers x threads x 4
    + shared memory per block) is reported, not added. ``stability`` is the mean of ``determinism``
    (share of repeated launches bit-identical to the first), ``steadiness`` (1 - timing IQR / median)
    and ``error_margin`` (1 - the largest share of its tolerance any element used). Measurements are
    None when the candidate died before them.

    ``repack_us``: the template's one-time repacking of the weights into the kernel's own layout
    (median over the timed shape's cases, synchronised wall time), outside ``time_us``; None when the
    kernel reads the canonical layout. The repacked bytes are part of ``extra_bytes``.
    """

    genome_hash: str
    status: str
    cause: str = ""
    time_us: float | None = None
    time_spread_us: float | None = None
    memory_bytes: int | None = None
    extra_bytes: int | None = None
    onchip_bytes: int | None = None
    stability: float = 0.0
    determinism: float | None = None  # the three parts of stability (see core/evaluation/protocol.py)
    steadiness: float | None = None
    error_margin: float | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    source_hash: str = ""
    compile_s: float = 0.0
    eval_s: float = 0.0
    resources: dict = field(default_factory=dict)
    source: str | None = None
    entry: str = ""
    flags: list = field(default_factory=list)
    launch: dict = field(default_factory=dict)
    compile_log: str = ""
    shape_errors: list = field(default_factory=list)  # [{"shape", "max_abs_err", "rel_err", "margin_used"}]
    # seconds per phase: compile, load, verification, timing, stability, memory; and repack, every
    # repack's seconds, spent within verification, timing and stability
    phases: dict = field(default_factory=dict)
    device: str = ""  # the slot that measured it ("cuda:1", "c:0")
    device_time_us: float | None = None  # its time on that device; ``time_us`` is scaled to the first slot's
    same_code_as: str = ""  # the source hash of a twin measured before: same machine code and launch
    repack_us: float | None = None  # the one-time weight repack, timed apart (see above)

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
                             "phases": dict(self.phases), **changes})


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
