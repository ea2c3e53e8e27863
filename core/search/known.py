"""Every genome a run has measured, without holding every measurement in memory.

The GA must never evaluate a genome twice as new, so it asks "was this measured?" of every child it
breeds, and it needs the measurement itself only for the genomes it is scoring: the population, a
generation's new and re-timed genomes, and now and then an old genome reused when the search space
runs dry. :class:`KnownMeasures` answers the first from a set of hashes (about 140 bytes a genome)
and keeps in memory only the measurements the run is using; a committed genome's measurement is
read back from the run database when it is needed again. The worker's memory then grows by the hash
of each new genome rather than by its whole measurement (about 3 kB), which the soak measured
growing faster than the data written (benchmarks/soak/report.md).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping

Loader = Callable[[list[str]], dict[str, dict]]  # hashes -> their latest stored measurements


class KnownMeasures(MutableMapping):
    """genome hash -> measure, over a whole run.

    ``stored`` are the hashes already in the run database, ``load`` reads their measurements
    (:meth:`store.writer.RunWriter.evaluations`), and ``compact`` shrinks a measure that stays in
    memory. New measures are held until :meth:`committed` says which of them the database now has.
    """

    def __init__(self, load: Loader | None = None, stored: Iterable[str] = (),
                 compact: Callable[[dict], dict] = dict) -> None:
        self._load = load
        self._stored = set(stored)
        self._compact = compact
        self._held: dict[str, dict] = {}  # the measures in use: the population, new ones, those read back
        self._new: set[str] = set()  # set since the last commit: not compacted yet
        self._unstored: dict[str, dict] = {}  # measured, committed nowhere (nsga2's losers): kept, compact

    def __contains__(self, h: object) -> bool:
        return h in self._held or h in self._stored or h in self._unstored

    def __getitem__(self, h: str) -> dict:
        if h in self._held:
            return self._held[h]
        if h in self._unstored:
            return self._unstored[h]
        if h not in self._stored or self._load is None:
            raise KeyError(h)
        return self.load([h])[h]

    def load(self, hashes: Iterable[str]) -> dict[str, dict]:
        """The measures of ``hashes`` (one database read for every one not held), held from now on
        until the next :meth:`committed` lets them go; KeyError for a hash this run never measured."""
        hashes = list(dict.fromkeys(hashes))
        missing = [h for h in hashes if h not in self._held and h not in self._unstored]
        unknown = [h for h in missing if h not in self._stored]
        if unknown:
            raise KeyError(unknown[0])
        if missing:
            read = self._load(missing) if self._load else {}
            for h in missing:
                if h not in read:
                    raise KeyError(f"{h}: listed as stored but not in the run database")
                self._held[h] = self._compact(read[h])
        return {h: self[h] for h in hashes}

    def __setitem__(self, h: str, measure: dict) -> None:
        self._held[h] = measure
        self._new.add(h)
        self._unstored.pop(h, None)

    def __delitem__(self, h: str) -> None:
        self._held.pop(h, None)
        self._stored.discard(h)
        self._new.discard(h)
        self._unstored.pop(h, None)

    def __iter__(self) -> Iterator[str]:
        yield from self._held
        yield from (h for h in self._unstored if h not in self._held)
        yield from (h for h in self._stored if h not in self._held and h not in self._unstored)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def committed(self, stored: Iterable[str], keep: Iterable[str] = ()) -> None:
        """The hashes in ``stored`` are now in the run database: of every measure the database has,
        only those in ``keep`` (the population) stay in memory. A new measure the database did not get
        (a child that lost its place under nsga2) stays, compacted, so that it is never measured again."""
        self._stored.update(stored)
        keep = set(keep)
        for h in list(self._held):  # the population, this generation's new measures, those read back
            measure = self._held[h]
            if h in self._new:
                measure = self._compact(measure)
            if h in keep:
                self._held[h] = measure
            else:
                del self._held[h]
                if h not in self._stored:
                    self._unstored[h] = measure
        self._new.clear()

    @property
    def held(self) -> int:
        """How many measures are in memory now."""
        return len(self._held) + len(self._unstored)
