#!/usr/bin/env python3
"""Benchmark a load + save round trip of one ONNX model: onnx-safeify against Python tools.

This is a benchmark harness, not a test: it measures, it asserts nothing about
speed.  Every tool runs as a child process on the same model, on the same
machine, in the same run of this script:

* ``onnx``          Python ``onnx.load(model)`` + ``onnx.save(m, out)`` (always; the baseline);
* ``onnx-safeify``  ``BIN MODEL --target none -o OUT`` (with ``--bin``);
* ``onnxsim``       ``python -m onnxsim MODEL OUT`` (with ``--peers``);
* ``onnxslim``      ``python -m onnxslim MODEL OUT`` (with ``--peers``);
* any ``--cmd NAME=SHELL COMMAND``, where ``{model}`` and ``{out}`` are replaced
  by the (shell-quoted) model and output paths.

Exit code 0 and a non-empty output file count as success; the output is
otherwise opaque.  Outputs go to a temporary folder that is deleted at the end.

What is measured, per run:

* wall time, from just before the child is started to the moment it is reaped
  (interpreter start-up included for the Python tools: that is what a user waits for);
* peak private anonymous memory: a sampler thread reads ``RssAnon`` from
  ``/proc/PID/status`` every ``--interval-ms`` (1 ms) for the child and all its
  descendants, sums it over the process tree and keeps the maximum.  Sampling
  can miss a peak that lasts less than an interval;
* time and memory come from separate runs: each round runs every tool twice, once
  timed with nothing sampling it, once sampled for memory (its time is not counted).
  The sampler wakes every millisecond; on a 2-core machine it takes CPU from a tool
  that uses both cores (the 50,000-node pin: 0.064 s median with the sampler waking
  every 1 ms, 0.052 s every 20 ms; Python's single-threaded round trip 0.261 and
  0.254 s).  ``--same-runs`` times the sampled runs instead, as this script did
  before;
* peak ``VmHWM`` (resident high-water mark, file-backed pages included), for
  reference: the largest sampled ``VmHWM`` of any process of the tree, or
  ``ru_maxrss`` from ``wait4`` (exact at exit) when that is larger than this
  script's own high-water mark (below it, it may be the pre-exec image of the
  fork, i.e. this script).

Before the counted runs every tool runs once as a warm-up that is not counted,
so that all of them find the model in the page cache.  Counted runs are
interleaved (tool A, B, C, then A, B, C, ...) so that drift in the machine's
state does not favour one tool.  With ``--shuffle`` each round runs the tools in
a new order (seeded: the same orders on every invocation): the tool that runs
first in a round, right after the baseline, was measured several milliseconds
slower than the same binary run later, so a fixed order favours every tool but
the first.  The sampler costs a few percent of one core.

Usage::

    python tools/bench_roundtrip.py --bin target/release/onnx-safeify --model M.onnx
    python tools/bench_roundtrip.py --model M.onnx --cmd 'copy=cp {model} {out}' --runs 3
    python tools/bench_roundtrip.py --bin BIN --model M.onnx --peers --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BASELINE = "onnx"
MIB = 1024 * 1024

# Characters that make a --cmd command need the shell.
SHELL_CHARS = set("|&;<>()$`\\\"'*?[]#~=%{}\n")

PY_ROUNDTRIP = "import sys, onnx; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"


@dataclass
class Tool:
    name: str
    argv_template: list[str]  # "{model}" / "{out}" are replaced in each element
    shell: bool = False  # True: argv_template is ["/bin/sh", "-c", COMMAND]

    def argv(self, model: Path, out: Path) -> list[str]:
        quote = shlex.quote if self.shell else str
        subst = {"{model}": quote(str(model)), "{out}": quote(str(out))}
        result = []
        for arg in self.argv_template:
            for key, value in subst.items():
                arg = arg.replace(key, value)
            result.append(arg)
        return result

    def display(self) -> str:
        if self.shell:
            return self.argv_template[-1]
        return " ".join(a if a in ("{model}", "{out}") else shlex.quote(a)
                        for a in self.argv_template)


@dataclass
class Run:
    wall_s: float
    rss_anon_peak_bytes: int
    vmhwm_peak_bytes: int
    exit_code: int
    samples: int
    output_bytes: int
    timed_out: bool = False
    cpu_s: float = 0.0  # user + system CPU of the child and its reaped descendants
    sampled: bool = True  # memory was sampled during the run
    timed: bool = True  # the run's wall and cpu time count

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.output_bytes > 0 and not self.timed_out


@dataclass
class Result:
    tool: Tool
    runs: list[Run] = field(default_factory=list)
    error: str | None = None

    def counted(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    def timed(self) -> list[Run]:
        return [r for r in self.counted() if r.timed]

    def median_wall(self) -> float | None:
        runs = self.timed()
        return statistics.median(r.wall_s for r in runs) if runs else None

    def median_cpu(self) -> float | None:
        runs = self.timed()
        return statistics.median(r.cpu_s for r in runs) if runs else None

    def min_wall(self) -> float | None:
        runs = self.timed()
        return min(r.wall_s for r in runs) if runs else None

    def peak_rss_anon(self) -> int | None:
        runs = [r for r in self.counted() if r.sampled]
        return max(r.rss_anon_peak_bytes for r in runs) if runs else None

    def peak_vmhwm(self) -> int | None:
        runs = self.counted()
        return max(r.vmhwm_peak_bytes for r in runs) if runs else None


# --- measuring one child ----------------------------------------------------------

def _read_status(pid: int) -> tuple[int, int] | None:
    """(RssAnon, VmHWM) in bytes from /proc/PID/status; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except OSError:
        return None
    anon = hwm = 0
    for line in text.splitlines():
        if line.startswith(b"RssAnon:"):
            anon = int(line.split()[1]) * 1024
        elif line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return anon, hwm


def _descendants(pid: int) -> list[int]:
    """pid and all its descendants, from /proc/PID/task/TID/children."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    stack.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return found


class Sampler(threading.Thread):
    """Polls the memory of a process tree until stopped; kills it after a deadline.
    With no interval it samples nothing: it only waits, to kill the tree at the deadline."""

    TREE_REFRESH = 10  # re-walk the process tree every this many samples

    def __init__(self, pid: int, interval_s: float, deadline: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.deadline = deadline
        self.stop = threading.Event()
        self.rss_anon_peak = 0
        self.vmhwm_peak = 0
        self.samples = 0
        self.timed_out = False

    def run(self) -> None:
        if self.interval_s is None:
            if not self.stop.wait(max(0.0, self.deadline - time.monotonic())):
                self._kill()
            return
        pids = [self.pid]
        n = 0
        while not self.stop.is_set():
            if n % self.TREE_REFRESH == 0:
                pids = _descendants(self.pid)
            n += 1
            total_anon = 0
            seen = False
            for p in pids:
                st = _read_status(p)
                if st is None:
                    continue
                seen = True
                total_anon += st[0]
                self.vmhwm_peak = max(self.vmhwm_peak, st[1])
            if seen:
                self.samples += 1
                self.rss_anon_peak = max(self.rss_anon_peak, total_anon)
            if time.monotonic() > self.deadline and not self.timed_out:
                self._kill()
            self.stop.wait(self.interval_s)

    def _kill(self) -> None:
        """The deadline passed: kill the process group."""
        self.timed_out = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


def measure(argv: list[str], out: Path, log: Path, interval_s: float | None,
            timeout_s: float) -> Run:
    """Run argv once as a child (own process group) and measure it (its memory sampled every
    interval_s seconds; None: not sampled)."""
    # ru_maxrss of a child also covers the memory image it had before exec, which
    # (fork or vfork) is this process's; it only says something about the child
    # when it is larger than our own high-water mark.
    own = _read_status(os.getpid())
    own_hwm = own[1] if own else 0
    with open(log, "wb") as log_file:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
        sampler = Sampler(proc.pid, interval_s, time.monotonic() + timeout_s)
        sampler.start()
        _, status, rusage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        sampler.stop.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    maxrss = rusage.ru_maxrss * 1024
    # Descendants left behind (a shell's background job, say) are not measured further.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    return Run(
        wall_s=wall,
        rss_anon_peak_bytes=sampler.rss_anon_peak,
        vmhwm_peak_bytes=max(sampler.vmhwm_peak, maxrss if maxrss > own_hwm else 0),
        exit_code=proc.returncode,
        samples=sampler.samples,
        output_bytes=out.stat().st_size if out.is_file() else 0,
        timed_out=sampler.timed_out,
        cpu_s=rusage.ru_utime + rusage.ru_stime,
        sampled=interval_s is not None,
    )


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_once(tool: Tool, model: Path, workdir: Path, args: argparse.Namespace,
             label: str, sampled: bool = True, timed: bool = True) -> tuple[Run, Path]:
    out = workdir / f"{tool.name}.out.onnx"
    log = workdir / f"{tool.name}.log"
    interval = args.interval_ms / 1000 if sampled else None
    run = measure(tool.argv(model, out), out, log, interval, args.timeout)
    run.timed = timed
    # Delete the output (and any external-data file beside it) before syncing: its
    # dirty pages are dropped instead of being written back while the next tool runs.
    for p in workdir.glob(f"{tool.name}.out*"):
        if p.is_file():
            p.unlink()
    os.sync()
    status = "ok" if run.ok else (
        "timed out" if run.timed_out else
        f"exit {run.exit_code}" if run.exit_code else "no output")
    if args.verbose or not run.ok:
        label = label + ("" if timed else " (memory)")
        print(f"  {label:>16} {tool.name:<14} {run.wall_s:8.3f} s  "
              f"RssAnon {run.rss_anon_peak_bytes / MIB:8.1f} MiB  "
              f"VmHWM {run.vmhwm_peak_bytes / MIB:8.1f} MiB  "
              f"{run.samples} samples  {status}", file=sys.stderr)
    return run, log


# --- tools and reporting ----------------------------------------------------------

def build_tools(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Tool]:
    py = args.python
    tools = [] if args.no_baseline else [Tool(BASELINE, [py, "-c", PY_ROUNDTRIP, "{model}", "{out}"])]
    if args.bin:
        tools.append(Tool("onnx-safeify",
                          [str(args.bin), "{model}", "--target", "none", "-o", "{out}"]))
    if args.peers:
        tools.append(Tool("onnxsim", [py, "-m", "onnxsim", "{model}", "{out}"]))
        tools.append(Tool("onnxslim", [py, "-m", "onnxslim", "{model}", "{out}"]))
    for spec in args.cmd:
        name, sep, command = spec.partition("=")
        name = name.strip()
        if not sep or not name or not command.strip():
            parser.error(f"--cmd {spec!r}: expected NAME=SHELL COMMAND")
        if "{out}" not in command:
            parser.error(f"--cmd {spec!r}: the command must write to {{out}}")
        # A plain command (words only) is run directly, as the Python tools are; one that
        # needs the shell (a redirection, a pipe, `;`...) through /bin/sh, whose start is
        # then part of its time.
        plain = command.replace("{model}", "").replace("{out}", "")
        if any(c in plain for c in SHELL_CHARS):
            tools.append(Tool(name, ["/bin/sh", "-c", command], shell=True))
        else:
            tools.append(Tool(name, command.split()))
    names = [t.name for t in tools]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        parser.error(f"tool names must be unique; repeated: {', '.join(dup)}")
    return tools


def host_info(python: str) -> dict:
    probe = ("import importlib.metadata as m, json, sys\n"
             "v = {'python': sys.version.split()[0]}\n"
             "for p in ('onnx', 'onnxsim', 'onnxslim', 'onnxruntime', 'protobuf'):\n"
             "    try: v[p] = m.version(p)\n"
             "    except m.PackageNotFoundError: pass\n"
             "print(json.dumps(v))")
    try:
        versions = json.loads(subprocess.run([python, "-c", probe], capture_output=True,
                                             text=True, check=True, timeout=60).stdout)
    except (subprocess.SubprocessError, OSError, ValueError):
        versions = {}
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "mem_total_bytes": mem_total, "packages": versions}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(results: list[Result], ref: str | None = None) -> None:
    base = next((r for r in results if r.tool.name == BASELINE), None)
    base_wall = base.median_wall() if base else None
    base_anon = base.peak_rss_anon() if base else None
    header = ["tool", "runs", "median s", "min s", "cpu s", "RssAnon MiB", "VmHWM MiB",
              f"speed vs {BASELINE}", f"RssAnon vs {BASELINE}"]
    rows = []
    for r in results:
        wall, anon, hwm = r.median_wall(), r.peak_rss_anon(), r.peak_vmhwm()
        speed = base_wall / wall if base_wall and wall else None
        mem = base_anon / anon if base_anon and anon else None
        rows.append([r.tool.name, f"{len(r.timed())}/{len([x for x in r.runs if x.timed])}",
                     _fmt(wall, ".3f"), _fmt(r.min_wall(), ".3f"), _fmt(r.median_cpu(), ".3f"),
                     _fmt(anon and anon / MIB, ".1f"), _fmt(hwm and hwm / MIB, ".1f"),
                     _fmt(speed, ".2f") + ("x" if speed else ""),
                     _fmt(mem, ".2f") + ("x" if mem else "")])
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(header, widths)))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))))
    print(f"speed = {BASELINE} median / tool median (higher is faster); "
          f"RssAnon = {BASELINE} peak / tool peak (higher is leaner).")
    safeify = next((r for r in results if r.tool.name == "onnx-safeify"), None)
    if safeify and base_wall and base_anon and safeify.median_wall() and safeify.peak_rss_anon():
        print(f"onnx-safeify vs python onnx: {base_wall / safeify.median_wall():.2f}x the speed, "
              f"{base_anon / safeify.peak_rss_anon():.2f}x less peak RssAnon")
    ref_r = next((r for r in results if r.tool.name == ref), None) if ref else None
    if ref_r and ref_r.median_wall():
        print(f"wall and cpu as multiples of {ref} ({ref_r.median_wall():.3f} s wall, "
              f"{ref_r.median_cpu():.3f} s cpu, medians):")
        for r in results:
            if r is not ref_r and r.median_wall():
                print(f"  {r.tool.name:<16} {r.median_wall() / ref_r.median_wall():6.2f}x wall  "
                      f"{r.median_cpu() / max(ref_r.median_cpu(), 1e-9):6.2f}x cpu")
    for r in results:
        if r.error:
            print(f"\n{r.tool.name}: {r.error.rstrip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time and measure the memory of an ONNX load+save round trip: "
                    "onnx-safeify against Python onnx (and optionally onnxsim, onnxslim "
                    "or any command).",
        epilog="Example: %(prog)s --bin target/release/onnx-safeify --model m.onnx "
               "--cmd 'copy=cp {model} {out}' --json bench.json")
    parser.add_argument("--model", type=Path, required=True, help="the ONNX model to round-trip")
    parser.add_argument("--bin", type=Path,
                        help="the onnx-safeify binary, run as: BIN MODEL --target none -o OUT")
    parser.add_argument("--runs", type=int, default=5,
                        help="counted runs per tool, after one warm-up run (default: 5)")
    parser.add_argument("--peers", action="store_true",
                        help="also run onnxsim and onnxslim (slow on big models)")
    parser.add_argument("--cmd", action="append", default=[], metavar="NAME=COMMAND",
                        help="benchmark a shell command too; {model} and {out} are replaced "
                             "by the model and output paths (repeatable)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python interpreter for the Python tools "
                             "(default: the one running this script)")
    parser.add_argument("--json", type=Path, metavar="OUT.json",
                        help="also write every run's measurements to this file")
    parser.add_argument("--interval-ms", type=float, default=1.0,
                        help="memory sampling interval in milliseconds (default: 1)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds before a run is killed and counted as failed "
                             "(default: 3600)")
    parser.add_argument("--tmpdir", type=Path,
                        help="where the temporary output folder is made (default: the "
                             "system's temporary folder)")
    parser.add_argument("--ratio-to", metavar="NAME",
                        help="also print each tool's median wall and cpu over this tool's")
    parser.add_argument("--shuffle", action="store_true",
                        help="run the tools in a new (seeded) random order each round")
    parser.add_argument("--same-runs", action="store_true",
                        help="time the runs whose memory is sampled (one run per tool and "
                             "round) instead of timing separate runs that nothing samples")
    parser.add_argument("--no-baseline", action="store_true",
                        help="leave out the Python onnx load+save baseline (a model with "
                             "external data over 2 GB cannot be saved by it as one file)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every run")
    args = parser.parse_args(argv)

    if not args.model.is_file():
        parser.error(f"--model {args.model}: no such file")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.bin and not (args.bin.is_file() and os.access(args.bin, os.X_OK)):
        found = shutil.which(str(args.bin))
        if not found:
            parser.error(f"--bin {args.bin}: not an executable file")
        args.bin = Path(found)
    model = args.model.resolve()
    tools = build_tools(args, parser)
    results = [Result(t) for t in tools]

    model_bytes = model.stat().st_size
    info = host_info(args.python)
    print(f"model: {model} ({model_bytes / MIB:.1f} MiB)")
    print(f"host: {info['cpus']} CPUs, {(info['mem_total_bytes'] or 0) / 2**30:.1f} GiB, "
          f"Linux {info['kernel']}; "
          + ", ".join(f"{k} {v}" for k, v in info["packages"].items()))
    order_note = "interleaved, a new order each round" if args.shuffle else "interleaved"
    split_note = ("time and memory from the same runs" if args.same_runs else
                  "each timed in one run and sampled for memory in another")
    print(f"runs: 1 warm-up + {args.runs} counted per tool, {order_note}, {split_note}; "
          f"sampling every {args.interval_ms:g} ms", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_roundtrip.", dir=args.tmpdir) as tmp:
        workdir = Path(tmp)
        for r in results:
            run, log = run_once(r.tool, model, workdir, args, "warm-up")
            if not run.ok:
                why = "timed out" if run.timed_out else f"exit {run.exit_code}"
                r.error = (f"warm-up failed ({why}, output {run.output_bytes} bytes): "
                           f"{r.tool.display()}\n" + _log_tail(log))
        rng = random.Random(0)
        # (result, sampled, timed) per run of a round.
        kinds = [(True, True)] if args.same_runs else [(False, True), (True, False)]
        for i in range(args.runs):
            order = [(r, s, t) for r in results for s, t in kinds]
            if args.shuffle:
                rng.shuffle(order)
            for r, sampled, timed in order:
                if r.error:
                    continue
                run, log = run_once(r.tool, model, workdir, args, f"run {i + 1}",
                                    sampled, timed)
                r.runs.append(run)
                if not run.ok:
                    r.error = f"run {i + 1} failed: {r.tool.display()}\n" + _log_tail(log)
    print()
    print_table(results, args.ratio_to)

    if args.json:
        doc = {
            "model": str(model), "model_bytes": model_bytes, "runs": args.runs,
            "interval_ms": args.interval_ms, "baseline": BASELINE, "host": info,
            "tools": [{
                "name": r.tool.name, "command": r.tool.display(), "error": r.error,
                "median_wall_s": r.median_wall(), "min_wall_s": r.min_wall(),
                "peak_rss_anon_bytes": r.peak_rss_anon(), "peak_vmhwm_bytes": r.peak_vmhwm(),
                "runs": [asdict(run) for run in r.runs],
            } for r in results],
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
