"""Where the test suite's time goes: ``make test``'s pytest command with a timeline of every test.

    python bench/bench_suite.py [-- PYTEST ARGS]     (default: -q -n 2 --dist loadfile --no-loadscope-reorder, as make test)

Prints the wall time; the machine's CPU use over the run (sampled from /proc/stat each second), so that
the seconds when a core sat idle show; each worker's start (collection) and end; per file, wall seconds
against the CPU seconds its worker and the worker's children spent (a file that waits on a clock, a
subprocess or Ray has far more wall than CPU); the tail, when only one worker was still busy; and the
machine's speed on one core just before and after (``SPEED_PROBE``), so that two runs' times can be compared.
Tests never assert times: this is where the figures in the Makefile's comments come from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _what(cmdline: list[str], comm: str) -> str:
    """A process's kind for the CPU table: a pytest worker, a Ray part, a sandboxed run, or its command's name."""
    text = " ".join(cmdline)
    if "xdist" in text or "sys.stdin.readline" in text:
        return "pytest-xdist worker"
    if "pytest" in text and "bench_suite" not in text:
        return "pytest: " + " ".join(Path(c).name if c.startswith("/") else c for c in cmdline[:4])[:70]
    if comm.startswith("ray::") or "/ray/" in text or comm in ("raylet", "gcs_server"):
        return f"ray: {comm if comm.startswith('ray::') or comm in ('raylet', 'gcs_server') else Path(cmdline[1] if len(cmdline) > 1 else comm).name}"
    if "sao_env.cli" in text or "sao-env" in text:
        return "sao-env subprocess"
    if "vllm" in text or comm.startswith("VLLM"):
        return "vLLM: " + ("OpenAI server" if "openai.api_server" in text else "engine server" if "engine/server.py" in text
                           else comm)
    if "multiprocessing.forkserver" in text or "multiprocessing.spawn" in text:
        return "pool worker (forkserver)"
    if "multiprocessing.resource_tracker" in text:
        return "multiprocessing resource tracker"
    if comm.startswith("python"):
        return "python: " + " ".join(Path(c).name if c.startswith("/") else c for c in cmdline[1:4])[:60]
    return comm


def _process_cpu() -> dict[int, tuple[str, float]]:
    """Every live process's kind and CPU seconds so far (utime + stime)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (_what([c.decode(errors="replace") for c in cmdline if c], comm),
                                  (int(fields[11]) + int(fields[12])) / tick)
    return found


SPEED_PROBE = """
import time, torch
torch.set_num_threads(1)
a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
def matmuls():
    t = time.perf_counter()
    for _ in range(200):
        a @ a
    return time.perf_counter() - t
def python_loop():
    t = time.perf_counter()
    sum(i * i for i in range(3_000_000))
    return time.perf_counter() - t
print(min(matmuls() for _ in range(3)), min(python_loop() for _ in range(3)))
"""
"""The machine's speed on one core, before and after the suite: this machine class runs the same code up to a
third slower in some hours (docs/performance.md), which the suite's time alone cannot tell from a change in it."""


def _speed_probe() -> tuple[float, float]:
    """Seconds (best of 3) of 200 float32 512x512 matmuls and of a 3M-step Python loop, on one core."""
    out = subprocess.run([sys.executable, "-c", SPEED_PROBE], capture_output=True, text=True, check=True).stdout
    matmul, loop = out.split()
    return float(matmul), float(loop)


def main(argv: list[str]) -> int:
    args = argv[argv.index("--") + 1:] if "--" in argv else ["-q", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]
    timeline = Path(tempfile.mkdtemp(prefix="sao-suite-")) / "timeline.jsonl"
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    processes: dict[int, tuple[str, float, float]] = {}  # pid -> (what, CPU seconds at the run's start, latest)

    def sample() -> None:
        last = _cpu_jiffies()
        before = _process_cpu()
        while not done.wait(1.0):
            now = _cpu_jiffies()
            busy, total = now[0] - last[0], now[1] - last[1]
            samples.append((time.time(), busy / max(total, 1) * (os.cpu_count() or 1)))
            last = now
            for pid, (what, cpu) in _process_cpu().items():  # CPU counted from the run's start, or the process's
                processes[pid] = (what, before[pid][1] if pid in before else 0.0, cpu)

    subprocess.call([sys.executable, "-m", "compileall", "-q", "-j", "0", "sao_env"], cwd=ROOT,  # as make test does
                    stdout=subprocess.DEVNULL)
    speed_before = _speed_probe()
    threading.Thread(target=sample, daemon=True).start()
    start = time.time()
    code = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                           env={**os.environ, "SAO_ENV_TEST_TIMELINE": str(timeline)})
    wall = time.time() - start
    done.set()
    records = [json.loads(line) for line in timeline.read_text().splitlines()] if timeline.is_file() else []
    tests = [r for r in records if r["event"] == "test"]
    print(f"pytest {' '.join(args)}: exit {code}, {wall:.0f} s of wall clock, {len(tests)} tests")
    speed_after = _speed_probe()
    print("machine speed, one core (lower is faster): 200 matmuls of 512x512 "
          f"{speed_before[0]:.2f} s before, {speed_after[0]:.2f} s after; a 3M-step Python loop "
          f"{speed_before[1]:.2f} s before, {speed_after[1]:.2f} s after")
    if samples:
        used = sum(c for _, c in samples)
        print(f"CPU: {used:.0f} core-seconds over {len(samples)} s sampled, {used / len(samples):.2f} cores on average "
              f"of {os.cpu_count()}")
        minutes: dict[int, list[float]] = defaultdict(list)
        for t, cores in samples:
            minutes[int((t - start) // 60)].append(cores)
        print("cores busy per minute: " + " ".join(f"{sum(v) / len(v):.2f}" for _, v in sorted(minutes.items())))
    if processes:
        groups: dict[str, float] = defaultdict(float)
        for what, first, latest in processes.values():
            groups[what] += latest - first
        seen = sum(groups.values())
        print(f"CPU by process, sampled each second ({seen:.0f} core-seconds seen; processes that lived under a second are "
              "missed, and a worker's reaped children count in the per-file figures below):")
        for what, cpu in sorted(groups.items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {cpu:7.1f}  {what}")
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_worker[r["worker"]].append(r)
    ends = {}
    for worker, rs in sorted(by_worker.items()):
        first = min(r.get("t", r.get("start", start)) for r in rs)
        ends[worker] = max(r["end"] for r in rs if r["event"] == "test") if any(r["event"] == "test" for r in rs) else first
        mine = [r for r in rs if r["event"] == "test"]
        print(f"{worker}: session start at {first - start:.0f} s, last test ends at {ends[worker] - start:.0f} s, "
              f"{sum(r['end'] - r['start'] for r in mine):.0f} s in tests, "
              f"{sum(r['cpu'] + r['children_cpu'] for r in mine):.0f} CPU s")
    workers = {w: end for w, end in ends.items() if w != "main"}  # pytest-xdist's controller runs no test
    if len(workers) > 1:
        print(f"tail: {max(workers.values()) - min(workers.values()):.0f} s with one worker left")
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in tests:
        entry = files[r["id"].split("::")[0]]
        entry[0] += r["end"] - r["start"]
        entry[1] += r["cpu"] + r["children_cpu"]
    print("\nfile: wall s, CPU s (worker and its reaped children), wall - CPU")
    for name, (w, c) in sorted(files.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {name:<50} {w:7.1f} {c:7.1f} {w - c:7.1f}")
    print(f"  {'all':<50} {sum(v[0] for v in files.values()):7.1f} {sum(v[1] for v in files.values()):7.1f}")
    print(f"\ntimeline: {timeline}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
