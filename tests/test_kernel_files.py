"""core.workloads.kernel_files: the textual ``#include "..."`` of kernel files, and the shared
kernels folder every family's files reach through it."""
from __future__ import annotations

from pathlib import Path

import pytest

from core.workloads import kernel_files
from core.workloads.kernel_files import COMMON, kernel_body, kernel_text, snippet

WORKLOADS = Path(kernel_files.__file__).parent


def _family(tmp_path: Path, files: dict[str, str]) -> str:
    """A fake template module ``<tmp>/fam/t.py`` with ``files`` under ``<tmp>/fam/kernels/`` (a
    name with a slash lands relative to ``<tmp>``); the module path, as a template's ``__file__``."""
    for name, text in files.items():
        path = tmp_path / name if "/" in name else tmp_path / "fam" / "kernels" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "fam" / "t.py").write_text("")
    return str(tmp_path / "fam" / "t.py")


def test_an_include_line_stands_for_the_included_body(tmp_path):
    fam = _family(tmp_path, {
        "main.cu": '/* the frame */\n\nint a;\n#include "../../kernels/two.cuh"  // b and c\nint d;\n',
        "kernels/two.cuh": "/* shared: b, c\n */\n\nint b;\n#include \"one.cuh\"\n",
        "kernels/one.cuh": "/* c */\nint {{c}};\n",
    })
    assert kernel_text(fam, "main.cu") == "/* the frame */\n\nint a;\nint b;\nint {{c}};\nint d;\n"
    assert kernel_body(fam, "main.cu") == "int a;\nint b;\nint {{c}};\nint d;\n"


def test_only_quoted_includes_of_c_files_at_a_line_start_are_resolved(tmp_path):
    fam = _family(tmp_path, {
        "a.c": '#include <stdio.h>\n    #include "x.h"\n',
        "b.py": '#include "x.h"\n',
    })
    assert kernel_text(fam, "a.c") == '#include <stdio.h>\n    #include "x.h"\n'
    assert kernel_text(fam, "b.py") == '#include "x.h"\n'


def test_an_include_cycle_or_a_body_without_a_final_break_is_an_error(tmp_path):
    fam = _family(tmp_path, {
        "loop.cuh": '#include "loop2.cuh"\n', "loop2.cuh": '#include "loop.cuh"\n',
        "open.cu": '#include "tail.cuh"\n', "tail.cuh": "int x;",
    })
    with pytest.raises(ValueError, match="includes itself"):
        kernel_text(fam, "loop.cuh")
    with pytest.raises(ValueError, match="line break"):
        kernel_text(fam, "open.cu")


def test_the_shared_kernels_are_reached_through_common():
    assert (WORKLOADS / "kernels" / "convert.cuh").exists()
    assert snippet(COMMON, "convert.cuh").startswith("static __device__ __forceinline__ float to_f(T h)")


@pytest.mark.parametrize("path", sorted(p for p in WORKLOADS.glob("*/kernels/*") if p.suffix in (".cu", ".cuh", ".c", ".h")),
                         ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_kernel_file_resolves_its_includes(path):
    text = kernel_text(str(path.parent.parent / "module.py"), path.name)
    assert '#include "' not in text
