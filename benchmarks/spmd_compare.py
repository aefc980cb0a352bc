#!/usr/bin/env python3
"""The SPMD path users run against Open MPI, the same loop on both sides.

Runs `hvactor-run -np N -- spmd_allreduce` and `mpirun -np N
spmd_allreduce_mpi` (Open MPI's benchmark loop, call for call: fill, one
warm-up call, a barrier, timed synchronous in-place float sums) in
interleaved rounds, the order alternating, each side a warm process over
all sizes with the same call counts, and prints per size the median
round's mean and p50 time per call with the rounds' range, the share of
each side's run in calls of 1 ms or more (under a load, waits for a peer
without a core), and Open MPI / hvactor (above 1: hvactor is faster).

  python3 benchmarks/spmd_compare.py --np 2,4 --rounds 5
  python3 benchmarks/spmd_compare.py --np 2 --load fork     # a shell loop per core
  python3 benchmarks/spmd_compare.py --np 2 --load spin     # a spinning process per core
  python3 benchmarks/spmd_compare.py --np 2 --load spin --calls-scale 20   # long runs per size
  python3 benchmarks/spmd_compare.py --np 2 --load fork --bind-to core   # both sides bound

Binding: by default each side has its launcher's own (hvactor-run leaves
ranks unbound as horovodrun does; mpirun binds each to a core when there
are no more ranks than cores); `--bind-to core` binds both sides' ranks a
core each, `--bind-to none` leaves both unbound.

Loads run for the whole comparison and compete with both sides alike:
`spin` is a process per core that never sleeps (a compute thread), `fork`
a shell loop per core that starts /bin/true over and over (data loaders,
shell scripts). Never asserts timing: it measures.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", default="2", help="rank counts, comma-separated (default 2)")
    p.add_argument("--rounds", type=int, default=4, help="rounds per rank count (default 4)")
    p.add_argument("-b", "--min-bytes", type=int, default=4)
    p.add_argument("-e", "--max-bytes", type=int, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=16)
    p.add_argument("--calls-scale", type=int, default=1,
                   help="every size's calls times this on both sides (default 1); under a "
                        "load, 10 or more makes each size's run span many scheduler ticks")
    p.add_argument("--load", choices=["none", "spin", "fork"], default="none")
    p.add_argument("--bind-to", choices=["default", "core", "none"], default="default",
                   help="default: each launcher's own; core: both sides a core per rank; "
                        "none: both unbound")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="the build tree (tools/hvactor-run, benchmarks/spmd_allreduce*)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run (default 600)")
    p.add_argument("--json", help="write the rounds and the table here")
    a = p.parse_args()
    a.np = [int(x) for x in a.np.split(",")]
    if a.rounds < 1 or any(n < 1 for n in a.np):
        p.error("--rounds and --np must be at least 1")
    if not 1 <= a.calls_scale <= 1000:
        p.error("--calls-scale must be 1-1000")
    return a


def cores():
    return len(os.sched_getaffinity(0))


def start_load(kind):
    if kind == "none":
        return []
    code = {"spin": [sys.executable, "-c", "while True: pass"],
            "fork": ["bash", "-c", "while :; do /bin/true; done"]}[kind]
    return [subprocess.Popen(code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(cores())]


def stop_load(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def command(side, a, n):
    sizes = [str(a.min_bytes), str(a.max_bytes), str(a.factor), str(a.calls_scale)]
    if side == "hvactor":
        run = os.path.join(a.build, "tools", "hvactor-run")
        bind = [] if a.bind_to == "default" else ["--bind-to", a.bind_to]
        return ([run, "-np", str(n)] + bind
                + ["--", os.path.join(a.build, "benchmarks", "spmd_allreduce")] + sizes)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("spmd_compare: mpirun not found (scripts/setup.sh installs Open MPI)")
    cmd = [mpirun, "-np", str(n)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if n > cores():
        cmd.append("--oversubscribe")  # mpirun's own binding is off then, as hvactor-run's
    if a.bind_to != "default":
        cmd += ["--bind-to", a.bind_to]
    return cmd + [os.path.join(a.build, "benchmarks", "spmd_allreduce_mpi")] + sizes


def run_once(side, a, n):
    """{size: (iters, mean_us, p50_us, p99_us, long_pct)} of one warm process over all
    sizes; long_pct: the share of the size's run in calls of 1 ms or more."""
    cmd = command(side, a, n)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if r.returncode != 0:
        sys.exit(f"spmd_compare: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    out = {}
    for line in r.stdout.splitlines():
        line = line.split(":", 1)[1] if line.startswith("[") else line  # hvactor-run's prefix
        f = line.split()
        if len(f) == 6 and f[0].isdigit():
            out[int(f[0])] = (int(f[1]), float(f[2]), float(f[3]), float(f[4]), float(f[5]))
    if not out:
        sys.exit(f"spmd_compare: no timings from {' '.join(cmd)}:\n{r.stdout}{r.stderr}")
    return out


def spread(values):
    m = statistics.median(values)
    return m, (max(values) - min(values)) / m * 100 if m > 0 else 0.0


def size_text(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def table(n, rounds, a):
    lines = [f"{n} ranks, {a.rounds} rounds, load {a.load}, binding {a.bind_to}, {cores()} cores; mean and p50 us per "
             "call (median round, range); >= 1 ms: the share of each side's run in calls of 1 ms "
             "or more (median over the rounds), what a load's lost cores cost; x = Open MPI / hvactor on the means",
             "", "| size | calls | hvactor mean (range) | hvactor p50 | Open MPI mean (range) "
             "| Open MPI p50 | >= 1 ms, hvactor / Open MPI | x |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for size in sorted(rounds["hvactor"][0]):
        h = [r[size] for r in rounds["hvactor"]]
        m = [r[size] for r in rounds["mpi"]]
        hm, hr = spread([x[1] for x in h])
        mm, mr = spread([x[1] for x in m])
        hp, mp = statistics.median(x[2] for x in h), statistics.median(x[2] for x in m)
        h99, m99 = statistics.median(x[3] for x in h), statistics.median(x[3] for x in m)
        hl, ml = statistics.median(x[4] for x in h), statistics.median(x[4] for x in m)
        rows.append({"size": size, "calls": h[0][0], "hvactor_mean_us": hm, "hvactor_range": hr,
                     "hvactor_p50_us": hp, "hvactor_p99_us": h99, "hvactor_long_pct": hl,
                     "mpi_mean_us": mm, "mpi_range": mr, "mpi_p50_us": mp, "mpi_p99_us": m99,
                     "mpi_long_pct": ml, "x": mm / hm})
        lines.append(f"| {size_text(size)} | {h[0][0]} | {hm:,.2f} ({hr:.0f}%) | {hp:,.2f} "
                     f"| {mm:,.2f} ({mr:.0f}%) | {mp:,.2f} | {hl:.0f}% / {ml:.0f}% | {mm / hm:.2f} |")
    return "\n".join(lines), rows


def main():
    a = parse_args()
    load = start_load(a.load)
    report = {"load": a.load, "cores": cores(), "rounds": a.rounds,
              "calls_scale": a.calls_scale, "runs": {}}
    try:
        for n in a.np:
            rounds = {"hvactor": [], "mpi": []}
            for i in range(a.rounds):
                order = ["hvactor", "mpi"] if i % 2 == 0 else ["mpi", "hvactor"]
                for side in order:
                    t0 = time.monotonic()
                    rounds[side].append(run_once(side, a, n))
                    print(f"# np {n} round {i + 1}/{a.rounds} {side}: "
                          f"{time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
            text, rows = table(n, rounds, a)
            print(text + "\n", flush=True)
            report["runs"][str(n)] = {"rounds": {k: [{str(s): v for s, v in r.items()} for r in rs]
                                                 for k, rs in rounds.items()}, "table": rows}
    finally:
        stop_load(load)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
