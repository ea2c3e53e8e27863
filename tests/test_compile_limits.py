"""The C compiler is bounded (issue 36, item 6; issue 35's include rule): includes only from the
kernel's folder and the toolchain's headers, refused without quoting the file; memory, CPU-time and
output-size limits on every compiler process; the compile cache capped in size and cleaned."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from core.backends import availability, cache
from core.backends.base import CompileError, KernelSource
from core.backends.c_guard import refused_include

pytestmark = pytest.mark.skipif(bool(availability("c")), reason="the C backend is not available here")

BODY = "void kernel(float *x) { x[0] = 1.0f; }\n"


@pytest.fixture
def backend():
    from core.backends.c import CBackend

    return CBackend()


def _compile(backend, source: str, cache_dir: Path):
    return backend.compile(KernelSource("c", source, "kernel", launch={"argtypes": ["ptr"]}), cache_dir)


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd"])
def test_an_include_of_a_file_outside_the_kernel_folder_fails_fast_without_quoting_it(backend, tmp_path, target):
    t0 = time.monotonic()
    with pytest.raises(CompileError) as err:
        _compile(backend, f'#include "{target}"\n{BODY}', tmp_path)
    assert time.monotonic() - t0 < 5
    msg = str(err.value)
    assert "refused" in msg and "toolchain's headers" in msg and "line 1" in msg
    assert "root:" not in msg  # /etc/passwd's first line starts "root:x:0:0"
    assert not list(tmp_path.glob("*.so"))


@pytest.mark.parametrize("source", [
    '#include "../secret.h"\n', "#include </etc/shadow>\n", '%:include "/etc/passwd"\n',
    '#define F "/etc/passwd"\n#include F\n', '#inc\\\nlude "/etc/passwd"\n', '#line 1 "/etc/shadow"\n',
    '# 3 "/etc/shadow"\n', 'asm(".incbin \\"/etc/passwd\\"");\n', '#include_next </etc/passwd>\n',
])
def test_every_way_of_naming_an_outside_file_is_refused(source):
    assert refused_include(source + BODY)


@pytest.mark.parametrize("source", [
    "#include <math.h>\n#include <omp.h>\n", '#include "local/header.h" // the kernel\'s own folder\n',
    '/* #include "/etc/passwd" */\n', 'const char *s = "#include \\"/etc/passwd\\"";\n', "#line 12\n",
])
def test_ordinary_sources_pass_the_include_check(source):
    assert refused_include(source + BODY) is None


def test_system_headers_still_compile(backend, tmp_path):
    art = _compile(backend, "#include <math.h>\n#include <omp.h>\n" + BODY, tmp_path)
    assert Path(art.path).exists()


def test_a_huge_static_array_fails_on_the_output_size_limit(backend, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(CompileError, match="output size limit"):
        _compile(backend, "static volatile char big[256 << 20] = {1};\n"
                          "void kernel(float *x) { x[0] = big[5]; }\n", tmp_path)
    assert time.monotonic() - t0 < 30
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".so", ".tmp")]


def test_a_compile_past_its_memory_limit_says_so(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("ABEBOT_COMPILE_MEMORY_BYTES", str(256 << 20))
    # 2^26 tokens from 27 lines of macros: the preprocessor wants gigabytes.
    bomb = "#define X0 1.0f+\n" + "".join(f"#define X{i} X{i - 1} X{i - 1}\n" for i in range(1, 27))
    t0 = time.monotonic()
    with pytest.raises(CompileError, match="memory limit"):
        _compile(backend, bomb + "float kernel(void) { return X26 1.0f; }\n", tmp_path)
    assert time.monotonic() - t0 < 30


def _entry(folder: Path, key: str, size: int, age_s: float) -> None:
    for suffix, n in ((".so", size), (".c", 100), (".sha256", 80)):
        p = folder / f"{key}{suffix}"
        p.write_bytes(b"\0" * n)
        t = time.time() - age_s
        os.utime(p, (t, t))


def test_the_cache_is_trimmed_to_its_cap_least_recently_used_first(tmp_path):
    for i in range(10):
        _entry(tmp_path, f"key{i}", 1 << 20, age_s=1000 - i * 10)  # key0 the oldest
    cache.touch(tmp_path / "key0.so")  # used just now: kept
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "big").write_bytes(b"\0" * (4 << 20))  # Triton's own folder: not counted, kept
    removed = cache.trim(tmp_path, cap=5 << 20)
    left = sorted({p.name.split(".")[0] for p in tmp_path.glob("key*")})
    total = sum(p.stat().st_size for p in tmp_path.glob("key*"))
    assert total <= int((5 << 20) * 0.9) and removed > 0
    assert "key0" in left and "key9" in left and "key1" not in left
    assert (tmp_path / "triton" / "big").exists()


def test_a_new_compile_trims_the_cache_and_clears_stale_temporary_files(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("ABEBOT_CACHE_BYTES", str(1 << 20))
    _entry(tmp_path, "old", 4 << 20, age_s=3600)
    stale = tmp_path / ".old.123.abcd.so.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    monkeypatch.setattr(cache, "_writes", {})  # this folder's first write: it trims
    art = _compile(backend, BODY, tmp_path)
    assert Path(art.path).exists()
    assert not (tmp_path / "old.so").exists() and not stale.exists()
