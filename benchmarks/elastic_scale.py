#!/usr/bin/env python3
"""elastic_scale.py: an elastic job at scale on an emulated cluster
(hvactor-netcluster: N nodes x 1 CPU, 1 Gbit/s links, mutual TLS, one
worker per node), whose world shrinks and grows while it trains.

    sudo flock /tmp/hvactor-bigrun.lock python3 benchmarks/elastic_scale.py \\
        --nodes 32 --rounds 3 [--name el1 --subnet-index 60] [--cases kill,down,add]

Discovery is a script that prints a hosts file: n1 .. n(N-1) at first (nN
is the spare), so the job runs N-1 workers. Each round, in one job:
  kill  SIGKILL of the worker on one node (never rank 0's): time to rank
        0's next commit in the world of N-2 (the host is blacklisted for
        --cooldown, 6-12 s; the world then grows back to N-1);
  down  `link NAME NODE down`: time to the N-2 world's first commit; the
        link comes back and the world grows back to N-1;
  add   nN appears in the hosts file: time to the N-world's first commit;
        then nN leaves it again (a graceful shrink, also timed).
Every time is from the fault (CLOCK_MONOTONIC, one clock for every
namespace) to the commit's time in rank 0. Prints one row per event and a
table (min / median / max per kind). Exit 1 when a wait ran out or the job
failed.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class Proc:
    """A process whose output lines are collected with their arrival times."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic_ns(), line.rstrip("\n")))

    def text(self, n=60):
        return "\n".join(l for _, l in self.lines[-n:])

    def wait_for(self, pattern, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for _, l in list(self.lines):
                if re.search(pattern, l):
                    return l
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.text()}")

    def stop(self, sig=signal.SIGTERM, grace=30):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
                self.p.wait(grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait()
        self.t.join(5)


EVENT = re.compile(r"^EVENT kind=(\w+)(.*)$")


def events(drv, kind):
    out = []
    for _, l in list(drv.lines):
        m = EVENT.match(l)
        if m and m.group(1) == kind:
            out.append(dict(kv.split("=", 1) for kv in m.group(2).split()))
    return out


def wait_event(drv, kind, timeout, pred):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for e in events(drv, kind):
            if pred(e):
                return e
        if drv.p.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no {kind} event as wanted within {timeout} s:\n{drv.text()}")


def commit_at(drv, size, since, timeout):
    return wait_event(drv, "commit", timeout,
                      lambda e: int(e["size"]) == size and int(e["t"]) >= since)


def joined_at(drv, size, since):
    hits = [e for e in events(drv, "joined") if int(e["size"]) == size and int(e["t"]) >= since]
    return hits[0] if hits else None


def write_hosts(path, hosts):
    with open(path + ".tmp", "w") as f:
        f.write("".join(h + "\n" for h in hosts))
    os.chmod(path + ".tmp", 0o644)
    os.rename(path + ".tmp", path)


def record(rows, kind, n, t0, commit, joined):
    total = (int(commit["t"]) - t0) / 1e6
    phases = ""
    if joined:
        a, c, s = (int(joined[k]) for k in ("assigned", "connected", "synced"))
        phases = (f"assigned {(a - t0) / 1e6:8.1f}  connected {(c - t0) / 1e6:8.1f}  "
                  f"synced {(s - t0) / 1e6:8.1f}")
    rows.append((kind, total))
    print(f"ROW {kind:<6} nodes={n} ms={total:8.1f}  {phases}", flush=True)


def worker_pid(drv, host):
    """The pid of the newest worker process on `host`, if it still runs."""
    started = [e for e in events(drv, "started") if e.get("host") == host]
    for e in reversed(started):
        try:
            with open(f"/proc/{e['pid']}/cmdline", "rb") as f:
                if b"elastic_scale" in f.read():
                    return int(e["pid"])
        except OSError:
            pass
    return None


def run_rounds(a, nc, drv, hosts_file, n, rows):
    base = [f"n{i}" for i in range(1, n)]
    full = n - 1
    limit = a.wait_s
    for r in range(a.rounds):
        if "kill" in a.cases:
            victim = f"n{2 + (r % (n - 2))}"
            pid = worker_pid(drv, victim)
            assert pid, f"no worker started on {victim}"
            t0 = time.monotonic_ns()
            os.kill(pid, signal.SIGKILL)
            c = commit_at(drv, full - 1, t0, limit)
            record(rows, "kill", n, t0, c, joined_at(drv, full - 1, t0))
            commit_at(drv, full, time.monotonic_ns(), limit)  # the cooldown ends, it grows back
        if "down" in a.cases:
            node = f"n{n // 2 + (r % (n // 2 - 1))}"
            t0 = time.monotonic_ns()
            nc("link", a.name, node, "down")
            try:
                c = commit_at(drv, full - 1, t0, limit)
                record(rows, "down", n, t0, c, joined_at(drv, full - 1, t0))
            finally:
                nc("link", a.name, node, "up")
            t1 = time.monotonic_ns()
            c = commit_at(drv, full, t1, limit)
            record(rows, "relink", n, t1, c, joined_at(drv, full, t1))
        if "add" in a.cases:
            t0 = time.monotonic_ns()
            write_hosts(hosts_file, base + [f"n{n}"])
            c = commit_at(drv, full + 1, t0, limit)
            record(rows, "add", n, t0, c, joined_at(drv, full + 1, t0))
            new = [e for e in events(drv, "started") if e.get("host") == f"n{n}"
                   and int(e["t"]) >= t0]
            if new:
                rows.append(("add-start", (int(new[0]["t"]) - t0) / 1e6))
            t1 = time.monotonic_ns()
            write_hosts(hosts_file, base)
            c = commit_at(drv, full, t1, limit)
            record(rows, "remove", n, t1, c, joined_at(drv, full, t1))


def table(rows, n, rounds):
    print(f"\nelastic at {n} nodes ({n - 1} workers + 1 spare), {rounds} rounds; ms from the "
          "fault to rank 0's first commit of the new world\n")
    print("| event | n | min ms | median ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for kind in ("kill", "down", "relink", "add", "add-start", "remove"):
        xs = [t for k, t in rows if k == kind]
        if xs:
            print(f"| {kind} | {len(xs)} | {min(xs):.0f} | {statistics.median(xs):.0f} | "
                  f"{max(xs):.0f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", default="kill,down,add")
    p.add_argument("--name", default="el1")
    p.add_argument("--subnet-index", default="60")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--step-ms", default="100")
    p.add_argument("--period-ms", default="1000")
    p.add_argument("--cooldown", default="6,12",
                   help="blacklist cooldown of a failed host, LOWER,UPPER s: longer than a "
                        "recovery, or the shrunken world is grown back before it commits")
    p.add_argument("--wait-s", type=float, default=60, help="bound of each wait for a commit")
    p.add_argument("--log", help="write the driver's whole output here")
    p.add_argument("--tool", default=os.path.join(ROOT, "tools/netcluster/hvactor-netcluster"))
    p.add_argument("--node-bin", default=os.path.join(ROOT, "build/tools/hvactor-node"))
    p.add_argument("--driver", default=os.path.join(ROOT, "build/benchmarks/elastic_scale"))
    a = p.parse_args()
    a.cases = set(a.cases.split(","))
    n = a.nodes
    tmp = tempfile.mkdtemp(prefix="elastic_scale.")
    os.chmod(tmp, 0o755)
    hosts_file = os.path.join(tmp, "hosts")
    script = os.path.join(tmp, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\nexec cat {hosts_file}\n")
    os.chmod(script, 0o755)
    write_hosts(hosts_file, [f"n{i}" for i in range(1, n)])
    stop = os.path.join(tmp, "stop")

    def nc(*args):
        r = subprocess.run([a.tool, *args], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"hvactor-netcluster {' '.join(args)}: {r.stdout}{r.stderr}")

    up = drv = None
    rows = []
    code = 1
    try:
        up = Proc([a.tool, "up", "--name", a.name, "--nodes", str(n), "--cpus", "1", "--link",
                   a.link, "--subnet-index", a.subnet_index, "--node-bin", a.node_bin])
        up.wait_for(r"is up", 120 + 4 * n)
        t_start = time.monotonic()
        drv = Proc([a.tool, "exec", a.name, "head", "--", "env", "HVACTOR_LOG_LEVEL=info", a.driver, "--script", script, "--stop",
                    stop, "--min", str(n // 2), "--max", str(n), "--step-ms", a.step_ms,
                    "--period-ms", a.period_ms, "--cooldown", *a.cooldown.split(",")])
        commit_at(drv, n - 1, 0, 120 + 4 * n)
        print(f"START the {n - 1}-worker world's first commit "
              f"{time.monotonic() - t_start:.1f} s after the driver started", flush=True)
        run_rounds(a, nc, drv, hosts_file, n, rows)
        open(stop, "w").close()
        drv.wait_for(r"^(RESULTS|ERROR)", 60)
        drv.wait_for(r"^RESULTS", 1)
        code = 0
    except AssertionError as e:
        print(f"FAILED: {e}", flush=True)
    finally:
        if drv:
            drv.stop()
            if a.log:
                with open(a.log, "w") as f:
                    f.write(drv.text(n=10**9) + "\n")
        if up:
            up.stop()
        subprocess.run([a.tool, "down", a.name], capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    table(rows, n, a.rounds)
    return code


if __name__ == "__main__":
    sys.exit(main())
