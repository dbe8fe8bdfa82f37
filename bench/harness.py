"""What every benchmark here shares: alternated runs, the machine's load, refusals, tables.

A benchmark measures each *side* (deskpool, then a peer, or one configuration after another)
once per *round*, in the same order every round, for several rounds (``--runs``, 5 by
default): deskpool, peer, deskpool, peer... A burst of load on the machine then hits both
sides alike, and the table gives the minimum, median and maximum of every figure over the
runs, and of the ratio of the first side to each other side, pair by pair (run *i* of one
side with run *i* of the other).

Each run is watched by a :class:`LoadMonitor`, which reads ``/proc`` (no dependency):

- the machine's CPU time from ``/proc/stat`` over the run: idle (with iowait) and steal;
- the number of runnable threads (``/proc/loadavg``, sampled every 0.2 s, the sampler itself
  not counted) and the 1-minute load average at the end;
- the CPU time of the benchmark's own processes (this one, its children, and PostgreSQL
  backends whose process title names one of the benchmark's databases), of the load
  generator, and what is left: the CPU time of *other* work on the machine.

A run is **refused** (marked starved: its figures are not printed, only that it was refused
and why) when any of these holds:

- the machine was saturated with other work's help: idle below 5 %, on average more than
  twice as many runnable threads as cores, *and* other work took a tenth of the machine or
  more (a benchmark that saturates the machine by itself, as a job queue draining a backlog
  does, is not starved by that);
- other work took more than a quarter of the machine's CPU (the figure would be the
  machine's, not the benchmark's);
- the load generator used at least 95 % of the cores it may use (it measured itself);
- the hypervisor stole more than 10 % of the CPU time.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CORES = os.cpu_count() or 1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: Refusal thresholds (see the module docstring).
IDLE_FLOOR = 0.05
RUNNABLE_PER_CORE = 2.0
OTHERS_SHARE = 0.25
OTHERS_SATURATING = 0.10
GENERATOR_SHARE = 0.95
STEAL_CEILING = 0.10
#: How often the runnable threads are sampled, in seconds.
SAMPLE_INTERVAL = 0.2


# ----------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks (``/proc/stat``, first line)."""

    total: int
    idle: int
    steal: int

    @classmethod
    def read(cls) -> CpuTimes:
        """Read them now."""
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
        # already counted in user and nice.
        return cls(total=sum(fields[:8]), idle=fields[3] + fields[4], steal=fields[7])


@dataclass(frozen=True)
class ProcessTimes:
    """One process: its parent, CPU ticks used so far (all threads) and command line.

    A PostgreSQL backend's command line (its title) names its database.
    """

    ppid: int
    ticks: int
    title: str


def read_processes() -> dict[int, ProcessTimes]:
    """Every process the kernel shows, with its CPU time so far."""
    processes: dict[int, ProcessTimes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue  # it exited meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is the state (field 3 of proc(5)): ppid is field 4, utime 14, stime 15.
        processes[int(entry.name)] = ProcessTimes(
            ppid=int(fields[1]), ticks=int(fields[11]) + int(fields[12]), title=title
        )
    return processes


def descendants(processes: dict[int, ProcessTimes], root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def runnable_now() -> int:
    """Threads runnable at this moment (``/proc/loadavg`` field 4), the reader not counted."""
    with open("/proc/loadavg") as loadavg:
        running = loadavg.read().split()[3].split("/")[0]
    return max(0, int(running) - 1)


def loadavg() -> float:
    """The 1-minute load average."""
    with open("/proc/loadavg") as file:
        return float(file.read().split()[0])


# ----------------------------------------------------------------------------- the monitor


@dataclass(frozen=True)
class Load:
    """The machine's load during one run, and whether the run is refused."""

    seconds: float
    idle: float
    steal: float
    runnable: float
    loadavg: float
    ours: float
    others: float
    generator: float | None
    starved: str | None

    def describe(self) -> str:
        """One line for the run log."""
        generator = "" if self.generator is None else f", generator {self.generator:.2f} cores"
        return (
            f"idle {self.idle:.0%}, steal {self.steal:.0%}, runnable {self.runnable:.1f}, "
            f"loadavg {self.loadavg:.1f}, ours {self.ours:.2f} cores, "
            f"others {self.others:.2f} cores{generator}"
        )


def judge(
    idle: float,
    steal: float,
    runnable: float,
    others: float,
    generator: float | None,
    generator_cores: float,
) -> str | None:
    """Why a run with this load is refused, or None."""
    if (
        idle < IDLE_FLOOR
        and runnable > RUNNABLE_PER_CORE * CORES
        and others >= OTHERS_SATURATING * CORES
    ):
        return (
            f"machine saturated (idle {idle:.0%}, {runnable:.1f} runnable on {CORES} cores, "
            f"other work {others:.2f} cores)"
        )
    if others > OTHERS_SHARE * CORES:
        return f"other work took {others:.2f} of {CORES} cores"
    if generator is not None and generator >= GENERATOR_SHARE * generator_cores:
        return f"load generator saturated ({generator:.2f} of {generator_cores:g} cores)"
    if steal > STEAL_CEILING:
        return f"steal {steal:.0%}"
    return None


class LoadMonitor:
    """Watches the machine while one run goes on: ``start()``, run, ``stop()``.

    :param markers: substrings of PostgreSQL backends' process titles (database names) whose
        CPU time is the benchmark's own.
    :param generator_cores: how many cores the load generator may use (its threads).
    """

    def __init__(self, markers: Iterable[str] = (), generator_cores: float = 1.0) -> None:
        self.markers = tuple(markers)
        self.generator_cores = generator_cores
        self.generator_pids: set[int] = set()
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._cpu = CpuTimes(0, 0, 0)
        self._processes: dict[int, ProcessTimes] = {}
        self._last: dict[int, ProcessTimes] = {}

    def generator(self, pid: int) -> None:
        """Count ``pid`` as the load generator (call before :meth:`stop`)."""
        self.generator_pids.add(pid)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            self._samples.append(runnable_now())

    def start(self) -> None:
        """Take the first reading and start sampling."""
        self._processes = read_processes()
        self._cpu = CpuTimes.read()
        self._started = time.perf_counter()
        self._samples = [runnable_now()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def cpu_by_part(self, part_of: Callable[[int, ProcessTimes], str | None]) -> dict[str, float]:
        """CPU seconds each part used from :meth:`start` to :meth:`stop`.

        ``part_of`` names the part a process (alive at the stop) belongs to, or ``None``.
        """
        parts: dict[str, float] = {}
        for pid, process in self._last.items():
            part = part_of(pid, process)
            if part is not None:
                before = self._processes.get(pid)
                ticks = process.ticks - (before.ticks if before else 0)
                parts[part] = parts.get(part, 0.0) + ticks / CLOCK_TICKS
        return parts

    def _ours(self, processes: dict[int, ProcessTimes]) -> set[int]:
        ours = descendants(processes, os.getpid())
        for pid, process in processes.items():
            postgres = process.title.startswith("postgres")
            if postgres and any(marker in process.title for marker in self.markers):
                ours.add(pid)
        return ours

    def stop(self) -> Load:
        """Take the last reading (before the run's processes exit) and judge the run."""
        seconds = time.perf_counter() - self._started
        cpu = CpuTimes.read()
        processes = self._last = read_processes()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

        def used(pids: Iterable[int]) -> float:
            ticks = 0
            for pid in pids:
                before = self._processes.get(pid)
                ticks += processes[pid].ticks - (before.ticks if before else 0)
            return ticks / CLOCK_TICKS / seconds

        total = max(1, cpu.total - self._cpu.total)
        idle = (cpu.idle - self._cpu.idle) / total
        steal = (cpu.steal - self._cpu.steal) / total
        busy_cores = (1 - idle) * CORES
        ours = used(self._ours(processes))
        generator = (
            used(pid for pid in self.generator_pids if pid in processes)
            if self.generator_pids
            else None
        )
        others = max(0.0, busy_cores - ours)
        runnable = statistics.fmean(self._samples)
        return Load(
            seconds=seconds,
            idle=idle,
            steal=steal,
            runnable=runnable,
            loadavg=loadavg(),
            ours=ours,
            others=others,
            generator=generator,
            starved=judge(idle, steal, runnable, others, generator, self.generator_cores),
        )


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Figure:
    """One figure a run yields.

    :param key: its key in :attr:`Run.figures`.
    :param label: its name in the table.
    :param digits: decimals shown.
    :param ratio: whether the table gives the first side's figure over each other side's.
    """

    key: str
    label: str
    digits: int = 0
    ratio: bool = False


@dataclass
class Run:
    """One run of one side: its figures and the machine's load meanwhile."""

    side: str
    round: int
    figures: dict[str, float]
    load: Load

    @property
    def accepted(self) -> bool:
        """Whether the run's figures may be printed."""
        return self.load.starved is None


@dataclass
class Series:
    """The runs of one comparison, and its table.

    :param title: what is compared (the table's heading).
    :param sides: the sides, the first one the numerator of every ratio.
    :param figures: the figures of each run, in table order.
    :param keep_starved: print starved runs' figures too (flagged): only for developing.
    """

    title: str
    sides: Sequence[str]
    figures: Sequence[Figure]
    keep_starved: bool = False
    runs: list[Run] = field(default_factory=list)

    def add(self, run: Run) -> None:
        """Record a run and log it (stderr-style line returned by :meth:`log_line`)."""
        self.runs.append(run)

    def log_line(self, run: Run) -> str:
        """What a run printed as it finished: its figures, or why they are withheld."""
        head = f"[{self.title}] round {run.round} {run.side}:"
        if run.accepted or self.keep_starved:
            shown = ", ".join(
                f"{figure.label} {fmt(run.figures[figure.key], figure.digits)}"
                for figure in self.figures
                if figure.key in run.figures
            )
            flag = "" if run.accepted else f" [STARVED: {run.load.starved}]"
            return f"{head} {shown}{flag}; {run.load.describe()}"
        return f"{head} REFUSED, {run.load.starved}; {run.load.describe()}"

    def usable(self, run: Run) -> bool:
        return run.accepted or self.keep_starved

    def measures(self, side: str, key: str) -> bool:
        """Whether ``side`` yields the figure ``key`` at all."""
        return any(run.side == side and key in run.figures for run in self.runs)

    def values(self, side: str, key: str) -> list[float]:
        """The figure ``key`` of every usable run of ``side``."""
        return [
            run.figures[key]
            for run in self.runs
            if run.side == side and self.usable(run) and key in run.figures
        ]

    def ratios(self, other: str, key: str) -> list[float]:
        """First side over ``other``, pair by pair (same round), both runs usable."""
        first = {run.round: run for run in self.runs if run.side == self.sides[0]}
        found = []
        for run in self.runs:
            if run.side != other or run.round not in first:
                continue
            mine = first[run.round]
            if self.usable(run) and self.usable(mine) and run.figures.get(key):
                found.append(mine.figures[key] / run.figures[key])
        return found

    def table(self) -> str:
        """The markdown table of min / median / max, then what was refused and the load."""
        header = "| figure | " + " | ".join(f"{side} (min / median / max)" for side in self.sides)
        lines = [f"**{self.title}**", "", header + " |", "|---" * (len(self.sides) + 1) + "|"]
        for figure in self.figures:
            cells = [
                spread(self.values(side, figure.key), figure.digits)
                if self.measures(side, figure.key)
                else "-"
                for side in self.sides
            ]
            lines.append(f"| {figure.label} | " + " | ".join(cells) + " |")
        for figure in self.figures:
            if not figure.ratio:
                continue
            for other in self.sides[1:]:
                values = self.ratios(other, figure.key)
                cells = [
                    f"{spread(values, 2, 'x')} ({len(values)} pair{'s' if len(values) > 1 else ''})"
                    if values
                    else "refused (no accepted pair)"
                ]
                cells += [""] * (len(self.sides) - 1)
                lines.append(
                    f"| {self.sides[0]} / {other}, {figure.label} | " + " | ".join(cells) + " |"
                )
        lines.append("")
        lines.extend(self.footer())
        return "\n".join(lines)

    def footer(self) -> list[str]:
        """Runs counted and refused, and the load during the accepted ones."""
        rounds = len({run.round for run in self.runs})
        refused = [run for run in self.runs if not run.accepted]
        lines = [
            f"{rounds} rounds, sides alternated in each ({', '.join(self.sides)}); "
            f"{len(self.runs) - len(refused)} of {len(self.runs)} runs accepted, "
            f"{len(refused)} refused as starved"
            + (
                " (SHOWN ANYWAY: --keep-starved, not a result)"
                if refused and self.keep_starved
                else ""
            )
            + "."
        ]
        for run in refused:
            lines.append(f"- refused: round {run.round} {run.side}: {run.load.starved}")
        accepted = [run.load for run in self.runs if run.accepted]
        if accepted:
            idle = pct_range([load.idle for load in accepted])
            runnable = num_range([load.runnable for load in accepted])
            others = num_range([load.others for load in accepted], 2)
            average = num_range([load.loadavg for load in accepted])
            lines.append(
                f"Load during the accepted runs (min-max): idle {idle}, runnable threads "
                f"{runnable}, other work {others} cores, 1-min loadavg {average}."
            )
        return lines


def fmt(value: float, digits: int) -> str:
    """A number with thousands separators."""
    return f"{value:,.{digits}f}"


def spread(values: Sequence[float], digits: int, suffix: str = "") -> str:
    """``min / median / max`` of ``values``, or a dash when there are none."""
    if not values:
        return "refused (no accepted run)"
    low, middle, high = min(values), statistics.median(values), max(values)
    return " / ".join(fmt(value, digits) + suffix for value in (low, middle, high))


def pct_range(values: Sequence[float]) -> str:
    """``12%-30%``."""
    return f"{min(values):.0%}-{max(values):.0%}"


def num_range(values: Sequence[float], digits: int = 1) -> str:
    """``1.2-3.4``."""
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def arguments(doc: str | None, runs_help: str) -> argparse.ArgumentParser:
    """A parser with what every benchmark takes: ``--runs`` (5) and ``--keep-starved``.

    :param doc: the benchmark's docstring (its first line describes the parser).
    """
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help=runs_help)
    parser.add_argument("--keep-starved", action="store_true", help="for developing only")
    return parser


def rounds(runs: int, sides: Sequence[str]) -> list[tuple[int, str]]:
    """The order of the runs: every side once per round, ``runs`` rounds."""
    return [(number, side) for number in range(1, runs + 1) for side in sides]


def print_run(series: Series, run: Run, out: Callable[[str], None]) -> None:
    """Record ``run`` in ``series`` and print its log line."""
    series.add(run)
    out(series.log_line(run))
