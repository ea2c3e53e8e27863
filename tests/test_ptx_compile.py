"""The machine_code compile paths without a GPU: a Triton module carrying edits is compiled ahead of
time for sm_90 with its PTX edited (filed in Triton's cache apart from the unedited kernel), and
CUDA C's edited PTX goes through ptxas, whose refusal is a compile error."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from core.backends.base import CompileError
from core.backends.ptx import carry
from core.backends.ptx.ptxas import find_ptxas
from core.workloads import get_workload
from tests.helpers import SIMULATED_GPU

FIXTURES = Path(__file__).parent / "fixtures" / "ptx"
H200 = dataclasses.replace(SIMULATED_GPU, backend="triton")
EDITS = ("cop:ld.global#0=cg", "maxnreg:*=64", "move:$L__BB9_9+0=1")


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("torch")
    pytest.importorskip("triton.backends.compiler")
    from core.backends import triton_aot
    from core.backends.triton import TritonBackend

    b = TritonBackend.__new__(TritonBackend)  # no GPU here: the device is described, not detected
    b.device = H200
    yield b
    triton_aot.shutdown()


def _compiled(backend, folder: Path, edits) -> tuple[list[str], list[dict]]:
    from core.evaluation.aot import workload_launches

    wl = get_workload("rmsnorm")
    problem = wl.validate_problem({"rows": 4}, "triton")
    template = wl.template("triton", problem, H200).run_with(type("C", (), {"machine_code": 1})())
    genome = template.gene_space().seed_genomes()[0].replace("machine_code", "edits", edits)
    kernel = template.render(genome)
    assert carry.carried(kernel.source) == tuple(edits)
    backend.precompile(backend.compile(kernel, folder), workload_launches("rmsnorm", "triton", problem, H200), 1)
    ptx = [p.read_text() for p in (folder / "triton").rglob("*.ptx")]
    meta = [json.loads(p.read_text()) for p in (folder / "triton").rglob("*.json") if not p.name.startswith("__grp")]
    return ptx, meta


def test_a_triton_module_with_edits_compiles_its_edited_ptx_apart(backend, tmp_path):
    plain_ptx, _ = _compiled(backend, tmp_path, ())
    assert plain_ptx and not any(".maxnreg 64" in p for p in plain_ptx)
    both_ptx, meta = _compiled(backend, tmp_path, EDITS)  # the same Triton cache: filed apart
    edited = [p for p in both_ptx if ".maxnreg 64" in p]
    assert edited and all("ld.global.cg" in p for p in edited)
    assert len(both_ptx) == 2 * len(plain_ptx)
    counts = [m["abebot_ptx_edits"] for m in meta if "abebot_ptx_edits" in m]
    assert counts and all((c["applied"], c["noop"]) == (2, 1) for c in counts)


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas on this machine")
def test_ptxas_refusing_edited_ptx_is_a_compile_error():
    from core.backends.ptx.nvrtc import assemble

    text = (FIXTURES / "add_rms.ptx").read_text()
    cubin, log = assemble(text, "sm_90a")
    assert cubin[:4] == b"\x7fELF" and "registers" in log
    with pytest.raises(CompileError, match="ptxas refused"):
        assemble(text.replace("ld.global.b16", "ld.global.zz.b16", 1), "sm_90a")


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas on this machine")
def test_a_ptx_version_newer_than_ptxas_is_lowered_and_said():
    from core.backends.ptx.nvrtc import assemble

    text = (FIXTURES / "add_rms.ptx").read_text().replace(".version 8.7", ".version 99.9")
    try:
        _, log = assemble(text, "sm_90a")
    except CompileError as exc:  # a ptxas whose message we do not recognise: it must at least say why
        assert "version" in str(exc)
        return
    assert "lowered" in log


def test_the_cuda_compile_options_become_a_ptx_compile_and_ptxas_options():
    from core.backends.ptx.nvrtc import split_arch

    arch, nvrtc, ptxas = split_arch(["--gpu-architecture=sm_90", "--maxrregcount=64", "--ptxas-options=-v"])
    assert (arch, nvrtc, ptxas) == ("sm_90", ["--gpu-architecture=compute_90", "--maxrregcount=64"],
                                    ("-v", "-maxrregcount=64"))
    with pytest.raises(CompileError):
        split_arch(["-lineinfo"])


def test_a_source_without_edits_is_left_byte_for_byte():
    assert carry.attach("int x;\n", ()) == "int x;\n"
    assert carry.carried(carry.attach("int x;", ("nc:ld.global#0",))) == ("nc:ld.global#0",)


def test_attach_wraps_only_the_modules_own_jit_functions():
    pytest.importorskip("triton.backends.compiler")
    import types

    import triton

    from core.backends.ptx import triton_hook

    def own(x):
        pass

    def foreign(x):
        pass

    module = types.ModuleType("abebot_triton_probe")
    own.__module__ = module.__name__
    module.own, module.foreign = triton.jit(own), triton.jit(foreign)
    assert triton_hook.attach(module, ("nc:ld.global#0",)) == 1
    assert "run" in vars(module.own) and "run" not in vars(module.foreign)
    options = types.SimpleNamespace(ir_override=triton_hook.marker(("nc:ld.global#0",)))
    assert triton_hook.edits_of(options) == ("nc:ld.global#0",)
    assert triton_hook.edits_of(types.SimpleNamespace(ir_override="kernel.ptx")) == ()
