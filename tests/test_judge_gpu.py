"""The Triton analogue of the judge-patching cheats (issue 35, item 1), on a GPU only.

A Triton module is Python: loaded in the process that launches it, one ``import`` reaches whatever that
process holds. Each cheat below is the seed's own module with a block appended that patches, at import,
the protocol, the launch checks or the launcher's timing (as ``tests/cheats/rmsnorm_patch_launcher.c``
does through the C API on the CPU). Beside the protocol, in one process, mode "protocol" was ``ok`` with
zeros as output; beside a judge, none may be ``ok``.

Run on the H200 (skipped without CUDA):
``PYTHONPATH=$PWD python -m pytest -q -n 0 -p no:cacheprovider tests/test_judge_gpu.py``
"""
from __future__ import annotations

import pytest

from core.backends import availability
from core.tools.check import Checker

TRITON_UNAVAILABLE = availability("triton")
pytestmark = pytest.mark.skipif(TRITON_UNAVAILABLE is not None, reason=f"needs a CUDA GPU (run on the device): "
                                                                       f"{TRITON_UNAVAILABLE}")
RMSNORM = {"rows": 256, "cols": 4096}

COMMON = '''
# ---- planted: patches the process this module is loaded in -------------------------------------
import os as _os
from core.backends.arrays import CheckResult as _Ok
import core.evaluation.checks as _C
try:
    import core.evaluation.launcher as _L
except ImportError:
    _L = None
_real_entry = launch  # what the harness calls: the module's launch(), not the @triton.jit kernel
'''

PATCHES = {
    # every check the loading process holds made to pass, and zeros written
    "protocol": '''
import core.evaluation.protocol as _p
def _result(args):
    return [a for a in args if isinstance(a, dict)][-1]
_p.Protocol._check = lambda self, *a, **k: None
_p.Protocol._verify = lambda self, *a: _result(a).update(shape_errors=[], margin_used=0.0)
_p.Protocol._benchmark = lambda self, *a: _result(a).update(time_us=(self.floor_us or 1.0) * 1.01, time_spread_us=0.0)
_p.Protocol._stability = lambda self, *a: _result(a).update(stability=1.0, determinism=1.0, steadiness=1.0, error_margin=1.0)
_p.Protocol._memory = lambda self, *a: _result(a).update(extra_bytes=0, onchip_bytes=0, memory_bytes=self.io_bytes)
_C.LaunchChecks.verify = lambda self, *a, **k: _Ok(True)
_C.LaunchChecks.after = lambda self, *a: None
def launch(x, w, out, *rest, **kwargs):
    out.zero_()
''',
    # the launcher's timing replaced by one right launch per case and a time of 1 ns
    "timing": '''
def _op_time(self, request):
    cases = [self.cases[u] for u in request["timing"]]
    last = {{}}
    for ci, c in enumerate(cases):
        for t in self.h.tensors:
            if t.read:
                c.data[t.name].copy_(c.pristine[t.name])
        self.h.launch(self.kernel, c)
        last[str(ci)] = list(range(c.shape["rows"]))
    self.runtime.synchronize()
    fake = [1e-9] * 200
    return {{"status": "ok", "kernel": fake, "chunks": fake[:8], "baseline": fake, "speedup": 1e4, "speedup_spread": 0.0,
            "noisy": False, "pair_baseline": request.get("pair"), "pair_baseline_us": 10.0, "timing_method": "events",
            "checks": {{"ok": True, "cause": "", "detail": ""}}, "last": last}}
if _L is not None:
    _L.LauncherServer.op_time = _op_time
''',
    # the baseline's paired times inflated 1000x
    "baseline": '''
if _L is not None:
    _real_time = _L.LauncherServer.op_time
    def _op_time(self, request):
        r = _real_time(self, request)
        r["baseline"] = [t * 1000 for t in r["baseline"]]
        r["speedup"] = (r.get("speedup") or 1.0) * 1000
        return r
    _L.LauncherServer.op_time = _op_time
''',
    # the launch checks disabled, and every timed launch skipped
    "skip": '''
_C.LaunchChecks.verify = lambda self, *a, **k: _Ok(True)
_C.LaunchChecks.after = lambda self, *a: None
_skip = [False]
def launch(*args, **kwargs):
    if not _skip[0]:
        return _real_entry(*args, **kwargs)
if _L is not None:
    _real_time = _L.LauncherServer.op_time
    def _op_time(self, request):
        _skip[0] = True
        try:
            return _real_time(self, request)
        finally:
            _skip[0] = False
    _L.LauncherServer.op_time = _op_time
''',
}
EXPECTED = {"protocol": ("wrong_result",), "timing": ("suspect",), "baseline": ("suspect",),
            "skip": ("wrong_result", "nan_output")}


@pytest.fixture
def triton_rmsnorm(tmp_path):
    checker = Checker("rmsnorm", "triton", RMSNORM, runs_dir=tmp_path, log_path=tmp_path / "sandbox.log",
                      timeout_s=120.0, stability_launches=8, second_method=False)
    checker.start()
    yield checker
    checker.close()


@pytest.mark.parametrize("mode", sorted(PATCHES))
def test_a_triton_module_patching_the_process_it_is_loaded_in_is_not_ok(triton_rmsnorm, mode):
    seed = triton_rmsnorm.seed
    source = seed.source + COMMON + PATCHES[mode].format()
    r = triton_rmsnorm.check(source, path=f"patch_{mode}.py")
    assert not r["ok"] and r["status"] in EXPECTED[mode], f"{r['status']}: {r['cause']}"


def test_the_triton_seed_itself_is_ok_through_the_judge(triton_rmsnorm):
    r = triton_rmsnorm.check(triton_rmsnorm.seed.source)
    assert r["ok"] and r["speedup"] > 0, f"{r['status']}: {r['cause']}"
