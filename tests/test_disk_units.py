"""The disk-full pause says its sizes in a readable unit (issue 36): a 4 MiB threshold read
"0.00 GiB free ... below the 0.00 GiB needed"."""
from __future__ import annotations

from core.config import RunConfig
from core.evaluation.disk_space import size_text
from core.run.worker import RunWorker


class _Writer:
    def __init__(self) -> None:
        self.statuses: list[tuple[str, str]] = []

    def heartbeat(self, **fields) -> None:
        pass

    def set_status(self, status: str, message: str = "") -> None:
        self.statuses.append((status, message))


def test_sizes_are_given_in_the_unit_that_keeps_them_readable():
    assert [size_text(n) for n in (0, 512, 2048, 4 << 20, 3 * (1 << 20) // 2, 1 << 30, 25 << 30, 3 << 40)] == [
        "0 B", "512 B", "2.00 KiB", "4.00 MiB", "1.50 MiB", "1.00 GiB", "25.0 GiB", "3.00 TiB"]


def test_the_disk_pause_message_reads_mib_for_a_small_threshold(tmp_path):
    lines: list[str] = []
    writer = _Writer()
    worker = RunWorker(writer, RunConfig(workload="gemm", backend="c"), tmp_path, tmp_path, echo=lines.append)
    shortages = [(2 << 20, 4 << 20), None]
    worker.disk.shortage = lambda: shortages.pop(0)
    worker.disk.free = lambda: 6 << 20
    worker.disk.poll_s = 0.0
    assert worker._wait_for_space(lambda run: None) is None
    paused = [m for s, m in writer.statuses if s == "paused"]
    assert paused and "2.00 MiB free" in paused[0] and "below the 4.00 MiB needed" in paused[0]
    assert "0.00 GiB" not in " ".join(lines) and any("resumed: 6.00 MiB free" in line for line in lines)
