"""The exported ``run_kernel.py`` taken home: its ``--problem`` is validated as the CLI validates it
(the workload's own settings, bounds and memory; one line and exit 2), the export's README shows the
workload's own settings, and a baseline whose optional library is missing is skipped in one line.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.evaluation.standalone import example_problem, write_standalone
from core.tools.export import readme_text, requirements_text
from core.workloads import WORKLOADS, get_workload
from tests.helpers import template

PROBLEM = {"rows": 8, "cols": 64, "dtype": "float32", "residual": False, "eps": 1e-6}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """An rmsnorm C kernel exported as a standalone folder (the seed genome, small problem)."""
    folder = tmp_path_factory.mktemp("rmsnorm-export")
    tpl = template("rmsnorm", "c", PROBLEM)
    write_standalone(folder, tpl.render(tpl.gene_space().seed_genomes()[0]), "rmsnorm", PROBLEM)
    return folder


def run_kernel(folder: Path, *args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"import runpy, sys; {prelude}sys.argv = ['run_kernel.py', *{list(args)!r}]; runpy.run_path('run_kernel.py', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("problem, why", [
    ('{"m": 512, "n": 512, "k": 512}', "rmsnorm has no setting k, m, n"),
    ('{"rows": 512', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
    ('{"rows": -4}', "rows must be an integer from 1"),
    ('{"rows": 1048576, "cols": 131072}', "problem needs ~"),
])
def test_run_kernel_refuses_a_bad_problem_in_one_line_with_exit_2(exported, problem, why):
    out = run_kernel(exported, "--problem", problem)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert out.stdout == ""


def test_run_kernel_skips_a_missing_optional_baseline_in_one_line(exported):
    out = run_kernel(exported, "--seconds", "0.01", "--stability-launches", "2", prelude="sys.modules['torch'] = None; ")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "ModuleNotFoundError" not in out.stderr, out.stderr
    assert re.search(r"torch_rms_norm: skipped \(.*torch.*\)", out.stdout), out.stdout
    assert "verification: passed" in out.stdout


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_export_readme_example_uses_the_workloads_own_settings(name):
    wl = get_workload(name)
    problem = wl.default_problem("c")
    example = example_problem(name, "c", problem)
    assert example and set(example) <= set(problem)
    wl.validate_problem({**problem, **example}, "c")  # accepted as it is written
    readme = readme_text("r1", {"workload": name, "backend": "c", "problem": problem}, {}, [])
    shown = json.loads(re.search(r"run_kernel.py --problem '([^']*)'", readme).group(1))
    assert shown == example


def test_the_script_docstring_shows_the_workloads_own_settings(exported):
    script = (exported / "run_kernel.py").read_text()
    assert """--problem '{"rows": 4}'""" in script and '"m"' not in script


def test_the_export_requirements_say_what_the_optional_baselines_need():
    text = requirements_text("c")
    assert "numpy" in text and "torch" in text and "skips them with one line" in text
