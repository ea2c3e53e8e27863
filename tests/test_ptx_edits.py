"""The PTX editor: addressing, every edit kind, refusals and no-ops, on PTX made by Triton's compiler
(tests/fixtures/ptx/make_fixtures.py says how), assembled by ptxas -arch=sm_90a where ptxas exists."""
from __future__ import annotations

from pathlib import Path

import pytest

from core.backends.ptx.apply import apply_edits, census, summary
from core.backends.ptx.edits import canonical, parse_edit
from core.backends.ptx.parse import parse
from core.backends.ptx.ptxas import PtxasError, assemble, find_ptxas

FIXTURES = Path(__file__).parent / "fixtures" / "ptx"
ADD_RMS = (FIXTURES / "add_rms.ptx").read_text()
LOOP = (FIXTURES / "loop_atomic.ptx").read_text()
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas on this machine")

ONE_OF_EACH = ["cop:ld.global#1=cg", "cop:st.global#3=cs", "evict:ld.global#4=evict_first", "evict:st.global#0=no_allocate",
               "l2hint:ld.global#5=evict_last", "pfsize:ld.global#2=256B", "nc:ld.global#0",
               "prefetch:ld.global#3=L2", "move:cvt#0=-5", "maxnreg:*=64", "minnctapersm:*=2"]


def status(report, edit):
    return next(o.status for o in report if o.edit == edit)


def test_an_unedited_ptx_round_trips_byte_for_byte():
    assert parse(ADD_RMS).text() == ADD_RMS
    assert apply_edits(ADD_RMS, [])[0] == ADD_RMS


def test_every_edit_kind_applies_to_real_triton_ptx():
    _, report = apply_edits(ADD_RMS, ONE_OF_EACH)
    assert summary(report) == {"applied": len(ONE_OF_EACH), "noop": 0, "refused": 0}, report


@needs_ptxas
@pytest.mark.parametrize("edit", ONE_OF_EACH)
def test_each_applied_edit_assembles_and_changes_the_cubin(edit):
    before, _ = assemble(ADD_RMS, "sm_90a", ())
    edited, report = apply_edits(ADD_RMS, [edit])
    assert report[0].status == "applied"
    after, _ = assemble(edited, "sm_90a", ())
    # ptxas schedules instructions itself: a move may come out as the same cubin (normalised away,
    # and then measured once, as a twin: core/backends/elf.py); every other kind changes the cubin
    assert after != before or edit.startswith("move:")


@needs_ptxas
def test_all_edits_together_assemble_for_sm_90a():
    edited, _ = apply_edits(ADD_RMS, ONE_OF_EACH)
    cubin, log = assemble(edited, "sm_90a")
    assert cubin[:4] == b"\x7fELF" and "registers" in log


@needs_ptxas
def test_ptxas_reports_invalid_ptx_as_an_error():
    with pytest.raises(PtxasError):
        assemble(ADD_RMS.replace("ld.global.b16", "ld.global.bogus.b16", 1), "sm_90a", ())


def test_an_address_past_the_last_occurrence_is_a_recorded_noop():
    text, report = apply_edits(ADD_RMS, ["cop:ld.global#99=cs", "move:$L__BB9_9+1=1", "unprefetch:prefetch#0"])
    assert text == ADD_RMS
    assert [o.status for o in report] == ["noop", "noop", "noop"]
    assert "24 such instructions" in report[0].detail


def test_nc_is_refused_on_a_pointer_the_kernel_writes_through():
    # ld.global#8..15 read the residual r, which the kernel stores back in place.
    text, report = apply_edits(ADD_RMS, ["nc:ld.global#8"])
    assert text == ADD_RMS and report[0].status == "refused"


def test_nc_is_allowed_beside_an_atomic_to_another_pointer():
    _, report = apply_edits(LOOP, ["nc:ld.global#0"])
    assert report[0].status == "applied"


def test_nc_is_refused_when_a_write_address_is_unknown():
    # the output pointer now comes from memory: no load can be proven read-only
    poisoned = LOOP.replace("ld.param.b64 \t%rd2, [loop_atomic_param_1];", "ld.global.b64 \t%rd2, [%rd3];")
    assert poisoned != LOOP
    _, report = apply_edits(poisoned, ["nc:ld.global#0"])
    assert report[0].status == "refused"


def test_an_l1_caching_operator_is_refused_on_a_bypassing_load_beside_atomics():
    bypassing = LOOP.replace("ld.global.b32", "ld.global.cg.b32")
    _, report = apply_edits(bypassing, ["cop:ld.global#0=ca", "cop:ld.global#1=cv"])
    assert [o.status for o in report] == ["refused", "applied"]


def test_illegal_qualifier_combinations_are_refused():
    # .lu is no cache operator of a non-coherent load; Triton's own evict_last load carries a policy
    _, report = apply_edits(ADD_RMS, ["nc:ld.global#0", "cop:ld.global#0=lu", "l2hint:ld.global#16=evict_first"])
    assert status(report, "cop:ld.global#0=lu") == "applied"  # cop applies first, then .nc is refused
    assert status(report, "nc:ld.global#0") == "refused"
    assert status(report, "l2hint:ld.global#16=evict_first") == "refused"


def test_a_move_across_a_dependence_or_the_segment_edge_is_refused():
    _, report = apply_edits(ADD_RMS, ["move:ld.global#4=-3"])  # its destination's default is set just before
    assert report[0].status == "refused" and "depends on" in report[0].detail
    _, report = apply_edits(LOOP, ["move:$L__BB0_2+0=-1"])  # the loop header's first instruction
    assert report[0].status == "refused" and "edge" in report[0].detail


def test_a_barrier_or_atomic_never_moves():
    _, report = apply_edits(LOOP, ["move:atom#0=-1", "move:bar#0=1"])
    assert [o.status for o in report] == ["refused", "refused"]


def test_block_addresses_name_branch_target_segments():
    text, report = apply_edits(LOOP, ["move:$L__BB0_2+1=1"])  # add.s32 %r10 past setp %p2 (independent)
    assert report[0].status == "applied"
    body = text[text.index("$L__BB0_2:"):]
    assert body.index("setp.lt.s32 \t%p2") < body.index("add.s32 \t%r10")


def test_an_edit_means_the_same_whatever_else_the_list_holds():
    alone, _ = apply_edits(ADD_RMS, ["cop:ld.global#6=cs"])
    together, _ = apply_edits(ADD_RMS, ["prefetch:ld.global#3=L2", "cop:ld.global#6=cs", "move:cvt#0=-5"])
    line = next(x for x in alone.splitlines() if "ld.global.cs" in x)
    assert line in together.splitlines()


def test_the_canonical_form_is_sorted_and_keeps_one_edit_per_slot():
    assert canonical(["nc:ld.global#0", "cop:ld.global#0=cs", "evict:ld.global#0=evict_last"]) == \
        ("evict:ld.global#0=evict_last", "nc:ld.global#0")
    assert canonical(["maxnreg:*=64", "maxnreg:*=128"]) == ("maxnreg:*=128",)


@pytest.mark.parametrize("bad", ["cop:ld.global#0=wb", "nc:st.global#0", "move:fma#1=0", "frob:ld.global#0",
                                 "cop:ld.global=ca", "maxnreg:*=7", "nc:ld.global#0=cs"])
def test_malformed_edits_are_refused_in_one_line(bad):
    with pytest.raises(ValueError) as err:
        parse_edit(bad)
    assert "\n" not in str(err.value)


def test_census_counts_the_editable_families():
    c = census(ADD_RMS)
    assert c["ld.global"] == 24 and c["st.global"] == 16


ROPE = (FIXTURES / "rope_cuda.ptx").read_text()


def test_a_loaded_32_bit_index_leaves_its_buffer_provably_read_only():
    # RoPE's cos/sin rows are found through positions loaded from memory; q and k are rotated in place
    from core.backends.ptx.dataflow import read_only_loads

    ptx = parse(ROPE)
    fn = ptx.functions[0]
    ro = read_only_loads(ptx, fn)
    loads = [(i, ins) for i, ins in ptx.instructions() if ins.root == "ld" and "global" in ins.parts]
    # the positions (.nc already), then q, k, cos, sin one element at a time, then the same as vectors
    assert [i in ro for i, _ in loads] == [True, False, False, True, True, False, False, True, True]
    _, report = apply_edits(ROPE, ["nc:ld.global#1", "nc:ld.global#3"])
    assert [o.status for o in report] == ["refused", "applied"]  # q/k is written; cos/sin is not


def test_nothing_is_read_only_in_a_function_that_calls_another():
    poisoned = ROPE.replace("\tret;", "\tcall.uni \tsome_func, ();\n\tret;", 1)
    assert poisoned != ROPE
    _, report = apply_edits(poisoned, ["nc:ld.global#3"])
    assert report[0].status == "refused"


@needs_ptxas
def test_cuda_c_ptx_takes_every_qualifier_edit():
    edits = ["nc:ld.global#3", "evict:ld.global#2=evict_first", "l2hint:st.global#0=evict_last",
             "pfsize:ld.global#4=128B", "prefetch:ld.global#4=L2::evict_last", "maxnreg:*=40"]
    edited, report = apply_edits(ROPE, edits)
    assert summary(report)["applied"] == len(edits), report
    assert assemble(edited, "sm_90", ())[0][:4] == b"\x7fELF"


def test_a_line_holding_several_instructions_is_opaque_to_every_proof():
    line = "\tmov.u32 \t%r900, %r901; st.global.u32 \t[%rd4], %r900;"
    text = LOOP.replace("$L__BB0_2:", line + "\n$L__BB0_2:", 1)
    assert text != LOOP and parse(text).text() == text
    _, report = apply_edits(text, ["nc:ld.global#0"])
    assert report[0].status == "refused"  # that line may store anywhere


def test_a_prefetch_never_lands_above_the_register_declarations():
    # the positions load's address is computed in the entry segment: the prefetch goes after the .reg lines
    edited, report = apply_edits(ROPE, ["prefetch:ld.global#0=L2"])
    assert report[0].status == "applied"
    lines = edited.splitlines()
    at = next(i for i, x in enumerate(lines) if "prefetch.global" in x)
    assert all(not x.strip().startswith(".reg") for x in lines[at:])


def test_a_register_only_inline_asm_line_leaves_the_proof_standing_but_taints_its_registers():
    line = "\t{ .reg .f16 l, h; mov.b32 {l, h}, %r900; cvt.f32.f16 %r901, l; }"
    text = LOOP.replace("$L__BB0_2:", line + "\n$L__BB0_2:", 1)
    _, report = apply_edits(text, ["nc:ld.global#0"])
    assert report[0].status == "applied"
    from core.backends.ptx.dataflow import UNKNOWN, origins

    ptx = parse(text)
    assert origins(ptx, ptx.functions[0])["%r901"] == frozenset({UNKNOWN})


def test_a_brace_with_a_comment_is_still_a_scope():
    assert parse("\t{ // callseq 0, 0\n").lines[0].kind == "open"


def test_a_tensor_map_store_proves_nothing_read_only():
    tma = "\tcp.async.bulk.tensor.2d.global.shared::cta.bulk_group \t[%rd2, {%r1, %r2}], [%r3];"
    text = LOOP.replace("\tret;", tma + "\n\tret;", 1)
    assert text != LOOP and apply_edits(LOOP, ["nc:ld.global#0"])[1][0].status == "applied"
    _, report = apply_edits(text, ["nc:ld.global#0"])
    assert report[0].status == "refused"
