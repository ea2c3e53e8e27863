"""The library dispatcher on the CPU: real C kernels from a library folder, looked up in the
format's order (exact, nearest M bucket, same architecture, native), verified before use, refused
when tampered with, and every miss counted and logged."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from core.backends import availability
from core.library import loader as loader_module
from core.library.dispatcher import Dispatcher, LibraryWarning
from core.library.keys import nearest_bucket
from core.library.manifest import MISSES, Library
from core.library.verify import VerifiedCache
from tests.test_library_dispatch_support import c_entry, c_library

pytestmark = pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")

COLS = 64
RMS = {"rows": 4, "cols": COLS, "residual": False, "eps": 1e-6}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A library of one RMSNorm entry (M bucket 4, 64 columns), shared read-only by the tests."""
    root = tmp_path_factory.mktemp("lib")
    cache = tmp_path_factory.mktemp("cc")
    return c_library(root, [("rmsnorm", RMS)], cache), cache


def dispatcher(lib, tmp_path, **kw) -> Dispatcher:
    return Dispatcher(lib, verified=VerifiedCache(tmp_path / "verified.json"), build_dir=tmp_path / "builds", **kw)


def rms_call(d: Dispatcher, rows: int, cols: int = COLS) -> tuple[bool, torch.Tensor, torch.Tensor]:
    x, w = torch.randn(rows, cols), torch.rand(cols) + 0.5
    out = torch.full((rows, cols), float("nan"))
    problem = {"rows": rows, "cols": cols, "dtype": "float32", "residual": False, "eps": 1e-6}
    ran = d.run("rmsnorm", problem, {"x": x, "w": w, "out": out})
    want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    return ran, out, want


def test_nearest_bucket_takes_the_smallest_bucket_above_else_the_largest():
    assert nearest_bucket([1, 4, 16], 3) == 4
    assert nearest_bucket([1, 4, 16], 4) == 4
    assert nearest_bucket([1, 4, 16], 40) == 16
    assert nearest_bucket([], 2) is None


def test_an_exact_key_runs_the_library_kernel_and_its_result_is_right(built, tmp_path):
    lib, _ = built
    d = dispatcher(lib, tmp_path)
    ran, out, want = rms_call(d, rows=4)
    assert ran
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert d.calls_by("rmsnorm") == {"exact": 1}
    assert d.resolve("rmsnorm", {"rows": 4, "cols": COLS, "dtype": "float32", "residual": False,
                                 "eps": 1e-6})[1].id == lib.entries[0].id


def test_a_smaller_or_larger_m_takes_the_nearest_bucket(built, tmp_path):
    lib, _ = built
    d = dispatcher(lib, tmp_path)
    for rows in (3, 9):  # below the bucket of 4, and above every bucket (the largest serves it)
        ran, out, want = rms_call(d, rows)
        assert ran
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert d.calls_by("rmsnorm") == {"nearest": 2}


def test_a_miss_runs_nothing_is_counted_and_logged_once_with_its_shape(built, tmp_path):
    lib, _ = built
    d = dispatcher(Library(entries=lib.entries, root=tmp_path), tmp_path)
    for _ in range(3):
        ran, out, _want = rms_call(d, rows=2, cols=48)  # no entry has 48 columns
        assert not ran and torch.isnan(out).all()
    assert d.calls_by("rmsnorm") == {"native": 3}
    lines = (tmp_path / MISSES).read_text().splitlines()
    assert len(lines) == 1
    miss = json.loads(lines[0])
    assert {k: miss[k] for k in ("op", "fmt", "N", "K", "M")} == {"op": "rmsnorm", "fmt": "fp32", "N": 48, "K": 48,
                                                                   "M": 2}
    assert miss["device"] and miss["time"].endswith("Z")


def test_an_entry_from_another_cpu_of_the_same_architecture_is_rebuilt_from_its_source(built, tmp_path):
    lib, _ = built
    moved = Library.from_dict(lib.to_dict(), root=lib.root)
    moved.entries[0].device["name"] = "Another CPU of the same architecture"
    d = dispatcher(moved, tmp_path)
    ran, out, want = rms_call(d, rows=4)
    assert ran
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert d.calls_by() == {"arch": 1}
    assert list((tmp_path / "builds").glob("*.so")), "the kept source was compiled here"


def test_an_entry_of_another_architecture_is_never_used(built, tmp_path):
    lib, _ = built
    other = Library.from_dict(lib.to_dict(), root=lib.root)
    other.entries[0].device.update(name="Some GPU", arch="sm_90")
    d = dispatcher(other, tmp_path, log_misses=False)
    assert not rms_call(d, rows=4)[0]
    assert d.calls_by() == {"native": 1}


def test_a_tampered_artefact_is_refused_with_a_warning_and_the_native_path_runs(tmp_path, built):
    _, cache = built
    lib = c_library(tmp_path / "lib", [("rmsnorm", RMS)], cache)
    art = lib.entries[0].artefact_path(lib.root)
    art.write_bytes(art.read_bytes() + b"\0")
    d = dispatcher(lib, tmp_path, log_misses=False)
    with pytest.warns(LibraryWarning, match="does not match its sha256"):
        ran, _out, _ = rms_call(d, rows=4)
    assert not ran
    assert "artefact" in d.refused[lib.entries[0].id]


def test_a_kernel_that_fails_the_check_is_refused_and_the_failure_remembered(tmp_path, built):
    _, cache = built
    # scale by 2 * (1 / rms): a wrong kernel that compiles and runs
    wrong = c_library(tmp_path / "lib", [("rmsnorm", RMS)], cache, seed=1,
                      source_edit=lambda s: s.replace("const float inv = (float)(1.0 /", "const float inv = (float)(2.0 /"))
    d = dispatcher(wrong, tmp_path, log_misses=False)
    with pytest.warns(LibraryWarning, match="failed verification"):
        assert not rms_call(d, rows=4)[0]
    remembered = json.loads((tmp_path / "verified.json").read_text())
    assert [v["ok"] for v in remembered.values()] == [False]


def test_a_verified_artefact_is_not_checked_again_by_a_later_process(built, tmp_path, monkeypatch):
    lib, _ = built
    assert rms_call(dispatcher(lib, tmp_path), rows=4)[0]

    def must_not_run(*a, **k):
        raise AssertionError("checked again")

    monkeypatch.setattr(loader_module, "check_kernel", must_not_run)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LibraryWarning)
        assert rms_call(dispatcher(lib, tmp_path), rows=4)[0]


def test_a_w4a16_entry_with_repacked_panels_serves_a_gptq_layout_call(tmp_path, built):
    _, cache = built
    problem = {"m": 2, "n": 32, "k_groups": 2, "zero_points": False}
    lib = c_library(tmp_path / "lib", [("w4a16", problem)], cache, seed=1,
                    genes={("memory_pattern", "layout"): "panels", ("memory_pattern", "vector_width"): 8})
    assert lib.entries[0].launch["layout"] == "panels"
    d = dispatcher(lib, tmp_path)
    from core.workloads.w4a16 import dequant_matmul

    words = torch.randint(-2**31, 2**31 - 1, (2, 16, 32), dtype=torch.int32)
    scales = torch.rand(2, 32) * 0.01 + 0.005
    for m in (2, 1):
        x = torch.randn(m, 2, 128)
        y = torch.full((m, 32), float("nan"))
        assert d.run("w4a16", {"m": m, "n": 32, "k_groups": 2, "dtype": "float32", "zero_points": False},
                     {"x": x, "qweight": words, "scales": scales, "y": y})
        torch.testing.assert_close(y, dequant_matmul(x, words, scales), atol=1e-4, rtol=1e-4)
    assert d.calls_by() == {"exact": 1, "nearest": 1}


def test_another_entry_of_the_same_key_serves_when_one_is_refused(tmp_path, built):
    _, cache = built
    lib = c_library(tmp_path / "lib", [("rmsnorm", RMS)], cache, seed=0)
    second = c_entry(lib.root, "rmsnorm", RMS, cache, seed=1)
    lib.add(second)
    assert len(lib.entries) == 1  # same key and backend: add replaces; keep both by hand
    lib.entries.insert(0, c_entry(lib.root, "rmsnorm", RMS, cache, seed=0))
    bad = lib.entries[0].artefact_path(lib.root)
    bad.write_bytes(b"tampered")
    d = dispatcher(lib, tmp_path, log_misses=False)
    with pytest.warns(LibraryWarning):
        ran, out, want = rms_call(d, rows=4)
    assert ran
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_calls_on_new_tensors_reuse_the_launcher_bound_for_their_shape(built, tmp_path):
    lib, _ = built
    d = dispatcher(lib, tmp_path)
    kept = []
    for _ in range(5):  # each call's tensors stay alive, so every call has new addresses
        ran, out, want = rms_call(d, rows=4)
        assert ran
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        kept.append(out)
    loaded = d._loaded[lib.entries[0].id]
    assert len(loaded._bound) == 1 and next(iter(loaded._bound.values())).slots


def test_a_pointer_derived_from_inside_a_call_tensor_falls_back_to_launchers_by_address():
    from core.library.loader import _slots

    x, out = torch.zeros(8), torch.zeros(8)

    class Launch:
        pointers = [(0, x.data_ptr()), (1, out.data_ptr())]

    assert [(p, n) for _l, p, n in _slots([Launch()], {"x": x, "out": out}, ())] == [((0, 1), ("x", "out"))]
    Launch.pointers = [(0, x.data_ptr() + 4), (1, out.data_ptr())]  # x[1:] passed: would go stale
    assert _slots([Launch()], {"x": x, "out": out}, ()) is None
    assert _slots([], {"x": x}, ()) is None


def test_two_weights_of_one_shape_each_get_their_own_repacked_launcher(tmp_path, built):
    _, cache = built
    problem = {"m": 1, "n": 32, "k_groups": 1, "zero_points": False}
    lib = c_library(tmp_path / "lib", [("w4a16", problem)], cache, seed=1,
                    genes={("memory_pattern", "layout"): "panels", ("memory_pattern", "vector_width"): 8})
    d = dispatcher(lib, tmp_path)
    from core.workloads.w4a16 import dequant_matmul

    x = torch.randn(1, 1, 128)
    scales = torch.rand(1, 32) * 0.01 + 0.005
    for _ in range(2):
        for seed in (1, 2):
            words = torch.randint(-2**31, 2**31 - 1, (1, 16, 32), dtype=torch.int32,
                                  generator=torch.Generator().manual_seed(seed))
            y = torch.full((1, 32), float("nan"))
            assert d.run("w4a16", {"m": 1, "n": 32, "k_groups": 1, "dtype": "float32", "zero_points": False},
                         {"x": x, "qweight": words, "scales": scales, "y": y})
            torch.testing.assert_close(y, dequant_matmul(x, words, scales), atol=1e-4, rtol=1e-4)


def test_an_entry_built_on_a_cpu_with_other_feature_flags_is_rebuilt_here(built, tmp_path):
    lib, _ = built
    assert lib.entries[0].device.get("cpu_flags")
    other = Library.from_dict(lib.to_dict(), root=lib.root)
    other.entries[0].device["cpu_flags"] = "0" * 12  # same model name, another instruction set
    d = dispatcher(other, tmp_path)
    ran, out, want = rms_call(d, rows=4)
    assert ran and d.calls_by() == {"exact": 1}
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert list((tmp_path / "builds").glob("*.so")), "the artefact was not loaded: the source was compiled here"


def test_an_entry_whose_loading_fails_unexpectedly_is_refused_not_raised(built, tmp_path, monkeypatch):
    lib, _ = built
    from core.library import dispatcher as dispatcher_module

    def broken(*a, **k):
        raise OSError("disk gone")

    monkeypatch.setattr(dispatcher_module, "load_entry", broken)
    d = dispatcher(lib, tmp_path, log_misses=False)
    with pytest.warns(LibraryWarning, match="OSError: disk gone"):
        assert not rms_call(d, rows=4)[0]
    assert d.calls_by() == {"native": 1}


def test_without_the_fast_launch_the_backends_own_bind_serves_each_set_of_addresses(built, tmp_path):
    lib, _ = built
    d = dispatcher(lib, tmp_path, fast_launch=False)
    kept = []
    for _ in range(3):
        ran, out, want = rms_call(d, rows=4)
        assert ran
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        kept.append(out)
    bound = next(iter(d._loaded[lib.entries[0].id]._bound.values()))
    assert bound.slots is None and len(bound.by_address) == 3
