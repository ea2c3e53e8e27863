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
