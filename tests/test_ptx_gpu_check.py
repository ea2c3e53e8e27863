"""The GPU check script's CPU parts: the edits it picks from a PTX, its SASS diffs, its bad input."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.tools import ptx_gpu_check as script
from core.backends.ptx.apply import apply_edits
from core.backends.ptx.ptxas import assemble, find_ptxas

ADD_RMS = (Path(__file__).parent / "fixtures" / "ptx" / "add_rms.ptx").read_text()


def test_the_menu_puts_nc_only_on_provably_read_only_loads():
    menu = script.menu(ADD_RMS)
    assert menu["nc"] == [f"nc:ld.global#{k}" for k in range(8)]  # x is read-only; the residual is written
    assert all(len(edits) <= 8 for edits in menu.values())
    for edits in menu.values():
        _, report = apply_edits(ADD_RMS, edits)
        assert all(o.status in ("applied", "noop", "refused") for o in report)


@pytest.mark.skipif(find_ptxas() is None or script.tool("cuobjdump") is None, reason="no ptxas or cuobjdump here")
def test_the_sass_diff_shows_what_an_edit_changed(tmp_path):
    before, after = tmp_path / "a.cubin", tmp_path / "b.cubin"
    before.write_bytes(assemble(ADD_RMS, "sm_90a", ())[0])
    after.write_bytes(assemble(apply_edits(ADD_RMS, ["nc:ld.global#0"])[0], "sm_90a", ())[0])
    diff, changed = script.sass_diff(before, after, "add_rms nc")
    assert changed >= 2 and any("LDG" in d and d.startswith("+") for d in diff)
    assert not any("/*0" in d for d in diff)  # addresses stripped


def test_an_unknown_target_is_refused_in_one_line_with_status_2(tmp_path, capsys):
    assert script.main(["--out", str(tmp_path), "--targets", "gemm:cuda"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


class FakeChecker:
    """Stands in for core.tools.check.Checker: 'compiles' the fixture PTX with the source's edits
    through ptxas into the cache, as the backends would, and reports made-up times."""

    def __init__(self, workload, backend, problem, *, runs_dir, **_):
        from core.backends.base import KernelSource

        self.backend, self.problem, self.cache = backend, problem, Path(runs_dir) / ".cache" / backend
        self.baseline = {"primary": "torch_eager", "time_us": 10.0, "device": {"name": "fake"}}
        self.seed = KernelSource(backend, "/* seed */\n", "k")
        self.evaluator = type("E", (), {"backend": type("B", (), {"device": type("D", (), {"arch": "sm_90a"})})})
        self.calls = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def check(self, source):
        from core.backends.ptx import carry

        self.calls += 1
        folder = self.cache / f"k{self.calls}"
        folder.mkdir(parents=True)
        edited = apply_edits(ADD_RMS, carry.carried(source))[0]
        (folder / "add_rms.ptx").write_text(edited)
        (folder / "add_rms.cubin").write_bytes(assemble(edited, "sm_90a", ())[0])
        time_us = 5.0 if carry.carried(source) else 6.0
        return {"status": "ok", "cause": "", "time_us": time_us, "speedup": 10.0 / time_us, "primary": "torch_eager",
                "evaluation": {"resources": {"registers": 32}}}


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas here")
def test_the_script_writes_its_json_log_and_diffs_for_each_target(tmp_path, monkeypatch):
    import json

    import core.backends.ptx.nvrtc as nvrtc
    import core.tools.check as check

    monkeypatch.setattr(check, "Checker", FakeChecker)
    monkeypatch.setattr(nvrtc, "nvrtc_ptx", lambda source, name, options: (ADD_RMS, ""))
    assert script.main(["--out", str(tmp_path), "--targets", "rope:cuda,rope:triton", "--variants", "nc,pf256"]) == 0
    result = json.loads((tmp_path / "ptx_gpu_check.json").read_text())
    assert [t["target"] for t in result["targets"]] == ["rope:cuda", "rope:triton"]
    for target in result["targets"]:
        assert "error" not in target, target.get("error")
        nc = target["variants"][0]
        assert nc["status"] == "ok" and nc["speedup_vs_unedited"] == 1.2 and nc["speedup_vs_unedited_paired"] == 1.2
        assert {o["status"] for o in nc["outcomes"]} == {"applied"}
        assert (tmp_path / nc["sass_diff"]).exists() and (nc["sass_changed_lines"] > 0 or script.tool("cuobjdump") is None)
    assert "editor bugs (an edit broke a kernel): none" in (tmp_path / "ptx_gpu_check.log").read_text()
