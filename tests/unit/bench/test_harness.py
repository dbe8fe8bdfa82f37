"""The benchmark harness: which runs it refuses, what its tables print, whose CPU it counts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import harness
from bench.harness import CORES, Figure, Load, Run, Series, judge, percentile, spread


def load(starved: str | None = None) -> Load:
    return Load(
        seconds=1.0,
        idle=0.3,
        steal=0.0,
        runnable=1.0,
        loadavg=1.0,
        ours=1.0,
        others=0.1,
        generator=None,
        starved=starved,
    )


def test_a_quiet_run_is_accepted() -> None:
    assert judge(0.3, 0.0, 1.5, 0.05, 0.4, 1.0) is None


def test_a_machine_saturated_with_other_work_refuses_the_run() -> None:
    reason = judge(0.01, 0.0, 2.5 * CORES, 0.15 * CORES, None, 1.0)
    assert reason is not None
    assert reason.startswith("machine saturated")


def test_a_benchmark_saturating_the_machine_alone_is_not_starved() -> None:
    assert judge(0.01, 0.0, 2.5 * CORES, 0.02 * CORES, None, 1.0) is None


def test_other_work_refuses_the_run() -> None:
    reason = judge(0.3, 0.0, 1.0, 0.5 * CORES, None, 1.0)
    assert reason is not None
    assert reason.startswith("other work")


def test_a_saturated_load_generator_refuses_the_run() -> None:
    reason = judge(0.3, 0.0, 1.0, 0.0, 0.97, 1.0)
    assert reason is not None
    assert reason.startswith("load generator saturated")


def test_the_table_withholds_refused_runs_and_pairs_ratios_by_round() -> None:
    series = Series("t", ["deskpool", "peer"], [Figure("rate", "req/s", ratio=True)])
    series.add(Run("deskpool", 1, {"rate": 200.0}, load()))
    series.add(Run("peer", 1, {"rate": 100.0}, load()))
    series.add(Run("deskpool", 2, {"rate": 999.0}, load("machine saturated")))
    series.add(Run("peer", 2, {"rate": 100.0}, load()))
    assert series.values("deskpool", "rate") == [200.0]
    assert series.ratios("peer", "rate") == [2.0]
    table = series.table()
    assert "999" not in table
    assert "1 refused as starved" in table
    assert "2.00x / 2.00x / 2.00x (1 pair)" in table


def test_a_side_without_accepted_runs_says_so() -> None:
    assert spread([], 0) == "refused (no accepted run)"


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0


def test_the_cpu_of_each_part_is_what_its_processes_used_during_the_run() -> None:
    spin = (
        "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
        "print('spun', flush=True)\ntime.sleep(60)"
    )
    monitor = harness.LoadMonitor()
    monitor.start()
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
    try:
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass
        assert child.stdout is not None
        assert child.stdout.readline() == "spun\n"  # its 0.5 s used, it waits to be read
        monitor.stop()

        def part_of(pid: int, process: harness.ProcessTimes) -> str | None:
            if pid == os.getpid():
                return "this"
            if pid == child.pid:
                return "child" if "process_time" in process.title else "untitled"
            return None

        parts = monitor.cpu_by_part(part_of)
    finally:
        child.kill()
        child.wait()
    assert set(parts) == {"this", "child"}
    # The kernel counts CPU time in ticks (10 ms), sampled: within a tenth of what was spun.
    assert parts["this"] >= 0.45
    assert 0.45 <= parts["child"] < 2.0
