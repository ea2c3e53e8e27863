"""The library folder format (core/library/manifest.py): load, save, hashes, refusals in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.library.manifest import (FORMAT, MANIFEST, VERSION, Entry, Library, LibraryError, entry_id,
                                   sha256_bytes, sha256_file)

SOURCE = b"void k(float *x) { x[0] = 1.0f; }\n"
ARTEFACT = b"\x7fELF not really"


def make_entry(root: Path, n: int = 4096, m: int = 1, device: str = "cpu0") -> Entry:
    sh = sha256_bytes(SOURCE)
    eid = entry_id("w4a16", "w4g128", n, 4096, m, "c", sh)
    folder = root / "entries" / eid
    folder.mkdir(parents=True)
    (folder / "kernel.c").write_bytes(SOURCE)
    (folder / "artefact.so").write_bytes(ARTEFACT)
    return Entry(id=eid, op="w4a16", fmt="w4g128", shape={"N": n, "K": 4096, "M": m},
                 problem={"n": n, "k": 4096, "m": m}, backend="c",
                 device={"name": device, "arch": "x86_64", "kind": "cpu"},
                 toolchain={"python": "3.11", "torch": None, "triton": None, "cuda": None, "driver": None, "cc": "gcc"},
                 source=f"entries/{eid}/kernel.c", source_hash=sh,
                 artefact=f"entries/{eid}/artefact.so", artefact_hash=sha256_bytes(ARTEFACT),
                 launch={"entry": "k"}, figures={"time_us": 3.0, "speedup": 1.2},
                 provenance={"run_id": "r1", "generation": 2})


def saved(tmp_path: Path) -> tuple[Library, Entry]:
    entry = make_entry(tmp_path)
    lib = Library(entries=[entry], model="llama-3.1-8b")
    lib.save(tmp_path)
    return lib, entry


def test_an_entry_id_names_op_format_shape_backend_and_source_hash():
    assert entry_id("rmsnorm", "fp32", 4096, 1, 8, "c", "ab" * 32) == "rmsnorm-fp32-n4096-k1-m8-c-abababababab"


def test_a_saved_library_loads_back_equal(tmp_path):
    lib, entry = saved(tmp_path)
    back = Library.load(tmp_path)
    assert back.entries == [entry] and back.model == "llama-3.1-8b" and back.root == tmp_path
    assert back.to_dict() == lib.to_dict()
    assert Library.load(tmp_path / MANIFEST).entries == [entry]
    data = json.loads((tmp_path / MANIFEST).read_text())
    assert (data["format"], data["version"]) == (FORMAT, VERSION)


def test_save_leaves_no_temporary_file_behind(tmp_path):
    saved(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entries", MANIFEST]


def test_the_key_is_op_format_shape_bucket_and_device_name(tmp_path):
    entry = make_entry(tmp_path, n=1024, m=8, device="H200")
    assert entry.key == ("w4a16", "w4g128", 1024, 4096, 8, "H200")


def test_untouched_files_verify(tmp_path):
    _, entry = saved(tmp_path)
    assert entry.verify_files(tmp_path) is None
    assert sha256_file(entry.source_path(tmp_path)) == entry.source_hash


def test_a_tampered_artefact_is_named_in_one_line(tmp_path):
    _, entry = saved(tmp_path)
    entry.artefact_path(tmp_path).write_bytes(ARTEFACT + b"!")
    why = entry.verify_files(tmp_path)
    assert "artefact artefact.so does not match its sha256" in why and "\n" not in why


def test_a_missing_source_is_named(tmp_path):
    _, entry = saved(tmp_path)
    entry.source_path(tmp_path).unlink()
    assert "source kernel.c is missing" in entry.verify_files(tmp_path)


def test_an_entry_without_artefact_verifies_its_source_only(tmp_path):
    entry = make_entry(tmp_path)
    bare = Entry.from_dict({**entry.to_dict(), "artefact": None, "artefact_hash": None})
    assert bare.artefact_path(tmp_path) is None and bare.verify_files(tmp_path) is None


def write_manifest(tmp_path: Path, data) -> Path:
    (tmp_path / MANIFEST).write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("data, words", [
    ({"format": FORMAT, "version": 2, "entries": []}, "version 2 is not supported"),
    ({"format": "other", "version": 1, "entries": []}, "not an abebot-library manifest"),
    ({"format": FORMAT, "version": 1, "entries": {}}, "'entries' must be a list"),
    ("{not json", "unreadable manifest"),
    ([1, 2], "not an abebot-library manifest"),
])
def test_a_bad_manifest_is_refused_in_one_line(tmp_path, data, words):
    with pytest.raises(LibraryError) as e:
        Library.load(write_manifest(tmp_path, data))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_folder_without_manifest_is_not_a_library(tmp_path):
    with pytest.raises(LibraryError, match="not a library folder"):
        Library.load(tmp_path)


@pytest.mark.parametrize("change, words", [
    ({"shape": {"N": 4, "K": 4}}, "missing 'M'"),
    ({"shape": {"N": 4, "K": 4, "M": 0}}, "shape M must be >= 1"),
    ({"shape": {"N": True, "K": 4, "M": 1}}, "'N' must be an integer"),
    ({"device": {"name": "x", "arch": "y", "kind": "tpu"}}, "device kind must be one of"),
    ({"artefact": None}, "both be set or both be null"),
    ({"source": "../../etc/passwd"}, "relative path inside the library"),
    ({"artefact": "/tmp/x.so"}, "relative path inside the library"),
    ({"toolchain": {"cc": 3}}, "toolchain 'cc' must be a string or null"),
    ({"op": None}, "'op' must be a string"),
])
def test_a_malformed_entry_is_refused_in_one_line(tmp_path, change, words):
    good = make_entry(tmp_path).to_dict()
    with pytest.raises(LibraryError) as e:
        Library.from_dict({"format": FORMAT, "version": VERSION, "entries": [{**good, **change}]})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_duplicate_entry_ids_are_refused(tmp_path):
    good = make_entry(tmp_path).to_dict()
    with pytest.raises(LibraryError, match="duplicate entry id"):
        Library.from_dict({"format": FORMAT, "version": VERSION, "entries": [good, good]})


def test_adding_an_entry_for_the_same_key_replaces_the_old_one(tmp_path):
    first = make_entry(tmp_path)
    second = Entry.from_dict({**first.to_dict(), "id": first.id + "x"})
    other = make_entry(tmp_path, n=1024)
    lib = Library(entries=[first, other])
    lib.add(second)
    assert [e.id for e in lib.entries] == [other.id, second.id] and lib.get(first.id) is None


def test_the_manifest_module_needs_only_the_standard_library():
    code = ("import sys; import core.library.manifest; "
            "bad = [m for m in ('numpy', 'torch', 'duckdb', 'pandas', 'core.search', 'store') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"


def test_a_device_record_keeps_the_arch_the_dispatcher_compares_and_the_cpu_flags_beside_it():
    from core.library.manifest import device_record

    assert device_record("Xeon", "x86_64", "cpu", {"cpu_flags_hash": "abc"}) == {
        "name": "Xeon", "arch": "x86_64", "kind": "cpu", "cpu_flags": "abc"}
    assert device_record("NVIDIA H200", "sm_90", "gpu", {"driver": 1}) == {
        "name": "NVIDIA H200", "arch": "sm_90", "kind": "cuda"}
