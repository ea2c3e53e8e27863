"""One lock for every way of running: a run on a local Dask cluster (``--cluster local:N``) holds the
device lock of the device its workers evaluate on, and the dashboard's busy check sees it.

Issue 36, item 5. No Dask cluster is started: the lock is taken before the evaluator exists.
"""
from __future__ import annotations

import pytest

import core.cli as cli
from core.config import RunConfig
from core.run.device_lock import DeviceBusy, acquire_device, cluster_devices, device_holder
from dashboard import launch as L

PROBLEM = '{"m": 32, "n": 32, "k": 32}'


def test_cluster_devices_names_the_device_of_a_local_cluster_only():
    assert cluster_devices("", 0) is None
    assert cluster_devices("local:2", 0) == [0] and cluster_devices("local:1", 3) == [3]
    assert cluster_devices("tcp://scheduler:8786", 0) == []


def test_a_local_cluster_run_holds_its_device_lock(tmp_path):
    cfg = RunConfig.from_dict({"workload": "gemm", "backend": "c", "cluster": "local:2", "problem": {"m": 32}})
    with cli.hold_devices(tmp_path, cfg, "run r1"):
        holder = device_holder(tmp_path, "c", 0)
        assert holder and "run r1" in holder
        assert L.busy_reason(tmp_path, "c", 0) and "run r1" in L.busy_reason(tmp_path, "c", 0)
        assert L.busy_reason(tmp_path, "c", L.run_devices(cfg))  # the launch form's check of the same config
    assert device_holder(tmp_path, "c", 0) is None


def test_a_remote_cluster_run_holds_no_device_of_this_host(tmp_path):
    cfg = RunConfig.from_dict({"workload": "gemm", "backend": "c", "cluster": "tcp://10.0.0.1:8786"})
    with cli.hold_devices(tmp_path, cfg, "run r1"):
        assert device_holder(tmp_path, "c", 0) is None
    assert L.run_devices(cfg) == []


def test_a_local_cluster_run_is_refused_while_another_run_holds_the_device(tmp_path, capsys):
    held = acquire_device(tmp_path, "c", 0, "run other")
    try:
        code = cli.main(["run", "--workload", "gemm", "--backend", "c", "--cluster", "local:1", "--problem", PROBLEM,
                         "--runs-dir", str(tmp_path), "--run-id", "r2"])
    finally:
        held.release()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "busy" in err[0] and "run other" in err[0]
    assert not (tmp_path / "r2").exists()


def test_while_a_local_cluster_run_holds_the_device_a_plain_run_is_refused(tmp_path):
    cfg = RunConfig.from_dict({"workload": "gemm", "backend": "c", "cluster": "local:1"})
    with cli.hold_devices(tmp_path, cfg, "run cluster-run"):
        with pytest.raises(DeviceBusy, match="cluster-run"):
            acquire_device(tmp_path, "c", 0, "run plain", wait_s=0)
