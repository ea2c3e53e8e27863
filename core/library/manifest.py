"""The library folder format, version 1: ``manifest.json`` and its entries (docs/library.md).

A library is a folder::

    LIB/manifest.json              the index, written atomically
    LIB/entries/<id>/kernel.<ext>  the source exactly as compiled
    LIB/entries/<id>/artefact.<x>  the compiled artefact, where the backend has one
    LIB/entries/<id>/genome.json   the genome (canonical JSON)
    LIB/misses.jsonl               appended by the dispatcher, one JSON object per miss

This module owns the format and nothing else: it depends only on the standard library, so the
dispatcher, the build tool and a model's import all read the same code. Every error it raises is a
:class:`LibraryError` whose message is one line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

FORMAT = "abebot-library"
VERSION = 1
MANIFEST = "manifest.json"
MISSES = "misses.jsonl"
ENTRIES = "entries"
GENOME = "genome.json"
DEVICE_KINDS = ("cpu", "cuda")
TOOLCHAIN_KEYS = ("python", "torch", "triton", "cuda", "driver", "cc")


class LibraryError(ValueError):
    """A library or entry that cannot be read or written (one line, for the user)."""


def sha256_bytes(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    """The sha256 hex digest of the file at ``path`` (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces): what ``genome.json`` and hashes use."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def entry_id(op: str, fmt: str, n: int, k: int, m: int, backend: str, source_hash: str) -> str:
    """``<op>-<fmt>-n<N>-k<K>-m<M>-<backend>-<source_hash[:12]>``: an entry's id and folder name."""
    return f"{op}-{fmt}-n{int(n)}-k{int(k)}-m{int(m)}-{backend}-{source_hash[:12]}"


def now_iso() -> str:
    """The current UTC time as ISO-8601 to the second (``created``)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _need(d: Any, key: str, kind: type | tuple[type, ...], where: str, optional: bool = False) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise LibraryError(f"{where}: missing {key!r}")
    value = d[key]
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise LibraryError(f"{where}: {key!r} must be {_kind_name(kind)}{' or null' if optional else ''}, "
                           f"not {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"str": "a string", "int": "an integer", "float": "a number", "dict": "an object",
                        "bool": "true/false"}.get(k.__name__, k.__name__) for k in kinds)


def _inside(rel: str | None, where: str, key: str) -> str | None:
    """``rel`` when it is a relative POSIX path that stays inside the library; LibraryError otherwise."""
    if rel is None:
        return None
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\\" in rel:
        raise LibraryError(f"{where}: {key} {rel!r} must be a relative path inside the library")
    return rel


@dataclass(frozen=True)
class Entry:
    """One kernel of the library: the ENTRY object of manifest.json, field for field."""

    id: str
    op: str
    fmt: str
    shape: dict              # {"N": int, "K": int, "M": int}; M is the bucket (the largest M served)
    problem: dict            # the workload problem dict the run used
    backend: str
    device: dict             # {"name": str, "arch": str, "kind": "cpu" | "cuda"}
    toolchain: dict          # TOOLCHAIN_KEYS -> str | None
    source: str              # "entries/<id>/kernel.<ext>", relative to the library
    source_hash: str
    artefact: str | None
    artefact_hash: str | None
    launch: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int, int, int, str]:
        """(op, fmt, N, K, M bucket, device name): the dispatcher's exact key."""
        return (self.op, self.fmt, self.shape["N"], self.shape["K"], self.shape["M"], self.device["name"])

    @classmethod
    def from_dict(cls, d: Any) -> Entry:
        """The entry ``d`` describes, checked field by field; LibraryError (one line) otherwise."""
        where = f"entry {d.get('id')!r}" if isinstance(d, dict) and isinstance(d.get("id"), str) else "entry"
        if not isinstance(d, dict):
            raise LibraryError(f"{where}: must be an object, not {type(d).__name__}")
        strings = {k: _need(d, k, str, where) for k in ("id", "op", "fmt", "backend", "source", "source_hash")}
        shape = _need(d, "shape", dict, where)
        for k in ("N", "K", "M"):
            if _need(shape, k, int, f"{where} shape") < 1:
                raise LibraryError(f"{where}: shape {k} must be >= 1")
        device = _need(d, "device", dict, where)
        for k in ("name", "arch", "kind"):
            _need(device, k, str, f"{where} device")
        if device["kind"] not in DEVICE_KINDS:
            raise LibraryError(f"{where}: device kind must be one of {', '.join(DEVICE_KINDS)}")
        toolchain = _need(d, "toolchain", dict, where)
        for k, v in toolchain.items():
            if v is not None and not isinstance(v, str):
                raise LibraryError(f"{where}: toolchain {k!r} must be a string or null")
        artefact = _need(d, "artefact", str, where, optional=True)
        artefact_hash = _need(d, "artefact_hash", str, where, optional=True)
        if (artefact is None) != (artefact_hash is None):
            raise LibraryError(f"{where}: artefact and artefact_hash must both be set or both be null")
        _inside(strings["source"], where, "source")
        _inside(artefact, where, "artefact")
        if "/" in strings["id"] or strings["id"] in (".", ".."):
            raise LibraryError(f"{where}: id must not contain '/'")
        return cls(**strings, shape=dict(shape), problem=dict(_need(d, "problem", dict, where)),
                   device=dict(device), toolchain=dict(toolchain), artefact=artefact, artefact_hash=artefact_hash,
                   launch=dict(d.get("launch") or {}), figures=dict(d.get("figures") or {}),
                   provenance=dict(d.get("provenance") or {}))

    def to_dict(self) -> dict:
        """The entry as the manifest stores it (a JSON-ready dict)."""
        return dataclasses.asdict(self)

    def folder(self, root: Path | str) -> Path:
        """This entry's folder inside the library at ``root``."""
        return Path(root) / ENTRIES / self.id

    def source_path(self, root: Path | str) -> Path:
        """The source file inside the library at ``root``."""
        return Path(root) / self.source

    def artefact_path(self, root: Path | str) -> Path | None:
        """The artefact file inside the library at ``root`` (None when the entry has none)."""
        return None if self.artefact is None else Path(root) / self.artefact

    def verify_files(self, root: Path | str) -> str | None:
        """None when the source (and the artefact, if any) match their sha256 in the manifest; otherwise
        one line saying which file is missing or altered."""
        checks = [("source", self.source_path(root), self.source_hash)]
        if self.artefact is not None:
            checks.append(("artefact", self.artefact_path(root), self.artefact_hash))
        for what, path, expected in checks:
            if not path.is_file():
                return f"entry {self.id}: {what} {path.name} is missing"
            if sha256_file(path) != expected:
                return f"entry {self.id}: {what} {path.name} does not match its sha256 in the manifest"
        return None


@dataclass
class Library:
    """A loaded library: its manifest's fields and the folder it was read from (``root``)."""

    entries: list[Entry] = field(default_factory=list)
    model: str | None = None
    created: str = field(default_factory=now_iso)
    root: Path | None = None

    @classmethod
    def load(cls, path: Path | str) -> Library:
        """The library in folder ``path`` (or its ``manifest.json``); LibraryError (one line) when the
        manifest is missing, not JSON, of another format or version, or has a malformed entry.
        Files are not hashed here: call :meth:`Entry.verify_files` before using an entry."""
        p = Path(path)
        manifest = p if p.name == MANIFEST and p.is_file() else p / MANIFEST
        try:
            data = json.loads(manifest.read_text())
        except FileNotFoundError:
            raise LibraryError(f"{p}: no {MANIFEST} (not a library folder)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LibraryError(f"{manifest}: unreadable manifest ({str(e).splitlines()[0]})") from None
        return cls.from_dict(data, root=manifest.parent, where=str(manifest))

    @classmethod
    def from_dict(cls, data: Any, root: Path | None = None, where: str = MANIFEST) -> Library:
        """The library a manifest object describes; LibraryError (one line) otherwise."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise LibraryError(f"{where}: not an {FORMAT} manifest")
        version = data.get("version")
        if version != VERSION:
            raise LibraryError(f"{where}: library format version {version!r} is not supported "
                               f"(this AbeBot reads version {VERSION})")
        raw = data.get("entries")
        if not isinstance(raw, list):
            raise LibraryError(f"{where}: 'entries' must be a list")
        entries = [Entry.from_dict(e) for e in raw]
        ids = [e.id for e in entries]
        if len(set(ids)) != len(ids):
            raise LibraryError(f"{where}: duplicate entry id {next(i for i in ids if ids.count(i) > 1)!r}")
        model = data.get("model")
        if model is not None and not isinstance(model, str):
            raise LibraryError(f"{where}: 'model' must be a string or null")
        return cls(entries=entries, model=model, created=str(data.get("created") or ""), root=root)

    def to_dict(self) -> dict:
        """The manifest object."""
        return {"format": FORMAT, "version": VERSION, "model": self.model, "created": self.created,
                "entries": [e.to_dict() for e in self.entries]}

    def save(self, path: Path | str | None = None) -> Path:
        """Write ``manifest.json`` into folder ``path`` (default ``root``) atomically: a temporary file in
        the same folder, fsynced, then ``os.replace``. Returns the manifest's path."""
        folder = Path(path) if path is not None else self.root
        if folder is None:
            raise LibraryError("library has no folder to save into")
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, folder / MANIFEST)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.root = folder
        return folder / MANIFEST

    def get(self, entry_id_: str) -> Entry | None:
        """The entry with this id, or None."""
        return next((e for e in self.entries if e.id == entry_id_), None)

    def add(self, entry: Entry) -> None:
        """Add ``entry``, replacing any entry with the same id or the same exact key and backend."""
        self.entries = [e for e in self.entries
                        if e.id != entry.id and (e.key, e.backend) != (entry.key, entry.backend)]
        self.entries.append(entry)


def device_record(name: str, arch: str, device_kind: str, versions: dict | None = None) -> dict:
    """An entry's ``device`` from a backend's device description (``DeviceInfo`` fields): ``kind``
    is ``cpu`` or ``cuda`` (a backend's ``device_kind`` ``gpu``); ``arch`` is the device's own
    (``sm_90``, ``x86_64``), the one the dispatcher compares. On a CPU ``cpu_flags`` adds the hash
    of the CPU's feature flags: C kernels are compiled with ``-march=native``, so a ``.so`` runs only
    on a CPU with the same instruction set (another one rebuilds from the kept source)."""
    versions = versions or {}
    kind = "cpu" if device_kind == "cpu" else "cuda"
    out = {"name": str(name), "arch": str(arch), "kind": kind}
    if kind == "cpu" and versions.get("cpu_flags_hash"):
        out["cpu_flags"] = str(versions["cpu_flags_hash"])
    return out
