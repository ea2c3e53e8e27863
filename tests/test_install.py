"""The install lists and server settings a new user gets: a CPU-only list without the GPU wheels,
the same pins as the full list, and uploads capped at what the Check page accepts."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from dashboard.checkkernel import MAX_BYTES

ROOT = Path(__file__).resolve().parents[1]
GPU = {"torch", "triton", "cupy-cuda13x"}
TESTS = {"pytest", "pytest-timeout", "pytest-xdist", "execnet", "playwright"}


def pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(re.match(r"([\w.-]+)==(\S+)", ln).groups() for ln in lines if ln.strip() and not ln.startswith("#"))


def test_the_cpu_requirements_are_the_full_list_less_the_gpu_wheels_and_the_test_tools():
    full, cpu = pins("requirements.txt"), pins("requirements-cpu.txt")
    assert not GPU & set(cpu)
    assert cpu == {k: v for k, v in full.items() if k not in GPU | TESTS}  # same pins, nothing forgotten


def test_the_dashboard_script_installs_the_cpu_list_without_a_gpu_and_tests_install_everything():
    dashboard = (ROOT / "scripts" / "dashboard.sh").read_text()
    assert "requirements-cpu.txt" in dashboard and "nvidia-smi" in dashboard
    assert "-r requirements.txt" in (ROOT / "scripts" / "test.sh").read_text()


def test_uploads_are_capped_at_what_the_check_page_accepts():
    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]
    assert server["maxUploadSize"] * 2**20 >= MAX_BYTES and server["maxUploadSize"] <= 2
