#!/usr/bin/env python3
"""netfault_test.py: network faults on an emulated cluster (hvactor-netcluster:
real hvactor-node processes in network namespaces behind shaped links, real
workers), each a whole scenario.

    python3 netfault_test.py --tool build/tools/netcluster/hvactor-netcluster \\
        --node-bin build/tools/hvactor-node --driver build/tests/integration/netfault_driver \\
        --elastic-driver build/tests/integration/elastic_driver [--repeat N] [CASE ...]

Cases (3 nodes x 1 CPU behind 200mbit links unless said; a cluster each,
torn down also when the case fails):
  down       n2's link goes down in the middle of a static job's allreduces:
             every surviving rank fails with a collective_error naming the
             peer (rank, node n2, its address) within BOUND_S (16 s) of the
             cut, the driver with node_lost; nothing hangs.
  elastic    the same cut under an elastic job (elastic_driver, the
             cluster's live nodes): it goes on with n1 and n3 from its last
             commit and finishes.
  block      `n2 block head` (n2's data links stay up) under an elastic
             job: the head drops n2 within BOUND_S, n2's worker is stopped,
             the job goes on with 2; after `unblock` n2 rejoins and the job
             grows back to 3 with a worker on n2.
  slow       n2's link at 1% (2mbit) under a static job with
             HOROVOD_STALL_CHECK_TIME_SECONDS=1: a stall warning names n2's
             rank, and every result is right.
  headdown   2 nodes; the driver runs in n1's namespace; the head's link is
             down for 5 s while a static job allreduces: every result is
             right and the job completes.
Prints each case's measured times (DETECT ...). Exit 77 (ctest: skipped)
without root or `ip netns`.
"""
import argparse
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netcluster_test as nt  # noqa: E402 (leftovers, assert_clean, can_run)

BOUND_S = 16.0  # docs/guides/network-faults.md: a cut peer fails every survivor within this


def now_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for every namespace


class Proc:
    """A process whose output lines are collected (with arrival times)."""

    def __init__(self, argv, env=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env,
                                  start_new_session=True)
        self.lines = []  # (monotonic ns, line)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((now_ns(), line.rstrip("\n")))

    def text(self):
        return "\n".join(l for _, l in list(self.lines))

    def find(self, pattern, since=0):
        for t, l in list(self.lines):
            if t >= since:
                m = re.search(pattern, l)
                if m:
                    return t, m
        return None

    def wait_for(self, pattern, timeout, since=0, what=None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hit = self.find(pattern, since)
            if hit:
                return hit
            if self.p.poll() is not None:
                self.t.join(5)
                hit = self.find(pattern, since)
                if hit:
                    return hit
                break
            time.sleep(0.05)
        raise AssertionError(f"no {what or pattern!r} within {timeout} s (rc {self.p.poll()}):\n"
                             + self.text()[-6000:])

    def wait(self, timeout):
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"hangs: still running after {timeout} s:\n" + self.text()[-6000:])
        self.t.join(5)
        return self.p.returncode

    def stop(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, 15)
                self.p.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.p.pid, 9)
                except ProcessLookupError:
                    pass
                self.p.wait()
        self.t.join(5)


class Cluster:
    def __init__(self, a, tmp, name, subnet, nodes=3, link="200mbit", cpus=1):
        self.a, self.name, self.nodes = a, name, nodes
        self.logs = os.path.join(tmp, name + "-logs")
        self.subnet = subnet
        self.up = Proc([a.tool, "up", "--name", name, "--nodes", str(nodes), "--link", link,
                        "--cpus", str(cpus), "--subnet-index", str(subnet), "--node-bin",
                        a.node_bin, "--logs", self.logs])
        self.up.wait_for(r"is up", 90)

    def addr(self, host):
        return f"198.18.{self.subnet}.{1 if host == 'head' else 10 + int(host[1:])}"

    def nc(self, *args, timeout=60):
        r = subprocess.run([self.a.tool, *args], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"hvactor-netcluster {' '.join(args)}: {r.returncode}\n"
                                 f"{r.stdout}{r.stderr}")
        return r.stdout + r.stderr

    def link(self, *words):
        self.nc("link", self.name, *words)

    def exec(self, host, *argv):
        return Proc([self.a.tool, "exec", self.name, host, "--", *argv])

    def status(self):
        """The node ids the head's registry lists now."""
        r = subprocess.run([self.a.tool, "exec", self.name, "head", "--", "sh", "-c",
                            'hvactor-node status --address "$HVACTOR_ADDRESS" '
                            '$NETCLUSTER_TLS_ARGS'], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=20)
        return set(re.findall(r"^(n\d+)\s+198\.", r.stdout, re.M))

    def close(self):
        self.up.stop()
        down_if_left(self.a, self.name)

    def node_logs(self):
        out = []
        if os.path.isdir(self.logs):
            for f in sorted(os.listdir(self.logs)):
                with open(os.path.join(self.logs, f), errors="replace") as fh:
                    out.append(f"----- {f}\n" + "".join(fh.readlines()[-15:]))
        return "\n".join(out)


def down_if_left(a, name):
    """Whatever a failed case left: `down` finds it by name."""
    if nt.leftovers(name):
        subprocess.run([a.tool, "down", name], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=60)


def read_reports(d):
    """rank -> (kind, peer, ns, host, message) of the driver's DIR/rank-R."""
    out = {}
    for f in os.listdir(d):
        if f.startswith("rank-") and not f.endswith(".tmp"):
            with open(os.path.join(d, f)) as fh:
                w = fh.read().strip().split(" ", 4)
            out[int(f[5:])] = (w[0], int(w[1]), int(w[2]), w[3], w[4] if len(w) > 4 else "")
    return out


def wait_running(d, n, timeout=60):
    """The hosts of ranks 0..n-1 once each ran its first allreduce."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        names = [f for f in os.listdir(d) if f.startswith("running-") and not f.endswith(".tmp")]
        if len(names) == n:
            hosts = {}
            for f in names:
                with open(os.path.join(d, f)) as fh:
                    hosts[int(f[8:])] = fh.read().split()[0]
            return hosts
        time.sleep(0.05)
    raise AssertionError(f"not all {n} ranks ran an allreduce within {timeout} s")


def job_dir(tmp, tag):
    d = tempfile.mkdtemp(prefix=tag + ".", dir=tmp)
    os.chmod(d, 0o777)
    return d


def case_down(a, c, tmp, times):
    d = job_dir(tmp, "down")
    drv = c.exec("head", a.driver, "3", "1000000", str(256 * 1024), "0", d)
    hosts = wait_running(d, 3)
    victim = next(r for r, h in hosts.items() if h == "n2")
    time.sleep(0.3)
    t0 = now_ns()
    c.link("n2", "down")
    rc = drv.wait(60)
    t_err, m = drv.wait_for(r"^ERROR \S*node_lost\S*: (.*)", 1)
    assert rc == 1, f"driver exited {rc}"
    assert "'n2'" in m.group(1) and c.addr("n2") in m.group(1) and f"rank {victim}" in m.group(1), \
        f"the driver's error does not name n2, its address and rank {victim}: {m.group(1)}"
    reports = read_reports(d)
    survivors = [r for r in hosts if r != victim]
    assert sorted(reports) == sorted(survivors), f"reports from {sorted(reports)}: {reports}"
    worst = 0.0
    for r in survivors:
        kind, peer, ns, host, msg = reports[r]
        assert kind == "collective_error" and peer == victim, f"rank {r}: {reports[r]}"
        assert f"peer rank {victim}" in msg and "'n2'" in msg and c.addr("n2") in msg, \
            f"rank {r}'s error does not name rank {victim}, n2 and its address: {msg}"
        worst = max(worst, (ns - t0) / 1e9)
    print(f"rank 0's error: {reports[survivors[0]][4][:300]}")
    assert worst <= BOUND_S, f"a survivor failed {worst:.2f} s after the cut (bound {BOUND_S} s)"
    times.append(("down: cut -> last survivor's error", worst))
    times.append(("down: cut -> driver's node_lost", (t_err - t0) / 1e9))


def elastic_driver(a, c, *extra):
    return c.exec("head", a.elastic_driver, "--min", "2", "--max", "3", "--epoch-ms", "100",
                  "--period-ms", "250", *extra)


EVENT = re.compile(r"^EVENT rank=(\d+) kind=(\w+) pid=(\S+) worker=(\S+) size=(\S+) "
                   r"epoch=(\S+) host=(\S+)")


def events(drv, kind="commit"):
    """(ns, rank, size, epoch, host) of every event of that kind."""
    out = []
    for t, l in list(drv.lines):
        m = EVENT.match(l)
        if m and m.group(2) == kind:
            out.append((t, int(m.group(1)), int(m.group(5)), int(m.group(6)), m.group(7)))
    return out


def wait_commit(drv, size, timeout, since=0, min_epoch=0, host=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for e in events(drv):
            if e[0] >= since and e[2] == size and e[3] >= min_epoch and host in (None, e[4]):
                return e
        if drv.p.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no commit at size {size} (epoch >= {min_epoch}, host {host}) within "
                         f"{timeout} s:\n" + drv.text()[-6000:])


def check_resumed(drv, t0, tag, times, bound=None):
    """The first commit at size 2 after t0 continues from the last commit
    (and comes within `bound` seconds of t0, when given)."""
    first2 = wait_commit(drv, 2, 40, since=t0)
    took = (first2[0] - t0) / 1e9
    assert bound is None or took <= bound, \
        f"{tag}: the first commit of the 2-worker world came {took:.2f} s after the cut " \
        f"(bound {bound} s):\n" + drv.text()[-4000:]
    before = [e for e in events(drv) if e[2] == 3 and e[0] < first2[0]]
    last3 = max(e[3] for e in before)
    # last3 + 2: the last commit saved, then its check for host updates
    # interrupted it (Horovod's commit() = save() + check_host_updates())
    # before the worker logged it; the job goes on from that commit.
    assert first2[3] in (last3 + 1, last3 + 2), \
        f"{tag}: the first commit at size 2 is epoch {first2[3]}, the last at size 3 was " \
        f"{last3}:\n" + "\n".join(l for _, l in drv.lines if "EVENT" in l)
    times.append((f"{tag}: cut -> first commit of the 2-worker world", (first2[0] - t0) / 1e9))
    return first2


def case_elastic(a, c, tmp, times):
    drv = elastic_driver(a, c, "--epochs", "80")
    wait_commit(drv, 3, 60, min_epoch=5)
    t0 = now_ns()
    c.link("n2", "down")
    # The connection timeout (9 s, checked at a 4 s heartbeat tick: 8-12 s
    # after the cut) and a new generation.
    check_resumed(drv, t0, "elastic", times, bound=17.0)
    rc = drv.wait(60)
    assert rc == 0, f"elastic_driver exited {rc}:\n{drv.text()[-4000:]}"
    _, m = drv.wait_for(r"^RESULTS (\d+) (.*)", 1)
    assert m.group(1) == "2" and m.group(2).split() == ["ok", "ok"], f"results: {m.group(0)}"
    last = max(e[3] for e in events(drv))
    assert last == 80, f"the job ended at epoch {last}, not 80"


def case_block(a, c, tmp, times):
    drv = elastic_driver(a, c, "--epochs", "250", "--cooldown", "1", "2")
    wait_commit(drv, 3, 60, min_epoch=5)
    t0 = now_ns()
    c.link("n2", "block", "head")
    while "n2" in c.status():
        assert (now_ns() - t0) / 1e9 < BOUND_S, f"the head still lists n2 {BOUND_S} s after the block"
        time.sleep(0.2)
    t_lost = now_ns()
    times.append(("block: block -> head's registry drops n2", (t_lost - t0) / 1e9))
    check_resumed(drv, t0, "block", times)
    # n2's worker is stopped: n2's namespace keeps only its hvactor-node.
    end = time.monotonic() + BOUND_S
    while True:
        left = []
        for pid in subprocess.run(["ip", "netns", "pids", f"{c.name}-n2"], capture_output=True,
                                  text=True).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if "hvactor-node" not in os.path.basename(cmd):
                left.append(f"{pid} {cmd}")
        if not left:
            break
        assert time.monotonic() < end, f"n2's worker still runs {BOUND_S} s after the block: {left}"
        time.sleep(0.2)
    times.append(("block: block -> n2's worker gone", (now_ns() - t0) / 1e9))
    t1 = now_ns()
    c.link("n2", "unblock", "head")
    while "n2" not in c.status():
        assert (now_ns() - t1) / 1e9 < BOUND_S, f"n2 did not rejoin within {BOUND_S} s"
        time.sleep(0.2)
    times.append(("block: unblock -> n2 listed again", (now_ns() - t1) / 1e9))
    back = wait_commit(drv, 3, 40, since=t1, host="n2")
    times.append(("block: unblock -> a commit of the 3-worker world on n2", (back[0] - t1) / 1e9))
    rc = drv.wait(90)
    assert rc == 0, f"elastic_driver exited {rc}:\n{drv.text()[-4000:]}"
    _, m = drv.wait_for(r"^RESULTS (\d+) (.*)", 1)
    assert m.group(1) == "3" and m.group(2).split() == ["ok"] * 3, f"results: {m.group(0)}"


DATA_SERVER = ("import socket,threading\n"
               "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "s.bind(('0.0.0.0', 7070)); s.listen(64); print('listening', flush=True)\n"
               "blob=b'x'*int(__import__('sys').argv[1])\n"
               "def serve(c):\n"
               "    try: c.sendall(blob)\n"
               "    finally: c.close()\n"
               "while True:\n"
               "    c,_=s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n")


def case_slow(a, c, tmp, times):
    # Every step reads a 512 KiB batch from a server in the head's namespace,
    # then allreduces 64 KiB: behind 2mbit, n2's rank reads for ~2 s and so
    # submits late (a pure allreduce loop slows every rank alike, and a
    # stall inspector, Horovod's too, reports only ranks that are late).
    # Once a warning named it, the link is restored and the job finishes.
    srv = c.exec("head", sys.executable, "-c", DATA_SERVER, str(512 * 1024))
    srv.wait_for("listening", 20)
    d = job_dir(tmp, "slow")
    drv = c.exec("head", a.driver, "3", "200", str(16 * 1024), "20", d,
                 "HOROVOD_STALL_CHECK_TIME_SECONDS=1", f"NETFAULT_DATA={c.addr('head')}:7070")
    hosts = wait_running(d, 3)
    slow = next(r for r, h in hosts.items() if h == "n2")
    t0 = now_ns()
    c.link("n2", "rate", "1%")
    t_stall, m = drv.wait_for(r"^EVENT rank=(\d+) .*event=stall.* waiting=\S*:\d", 60, since=t0,
                              what="a stall warning naming a rank")
    waiting = re.search(r"waiting=(\S+)", m.group(0)).group(1)
    times.append(("slow: rate 1% -> first stall warning naming a rank", (t_stall - t0) / 1e9))
    named = {int(x) for part in waiting.split(";") for x in
             part.rpartition(":")[2].split(",") if x.isdigit()}
    assert named == {slow}, f"the stall warning names ranks {named}, not {slow} (n2): {m.group(0)}"
    print(f"stall warning: {m.group(0)[:400]}")
    c.link("n2", "rate", "200mbit")
    rc = drv.wait(120)
    assert rc == 0, f"driver exited {rc}:\n{drv.text()[-4000:]}"
    times.append(("slow: rate 1% -> job done", (now_ns() - t0) / 1e9))
    reports = read_reports(d)
    assert all(reports[r][0] == "ok" and reports[r][4] == "200" for r in range(3)), \
        f"reports: {reports}"
    srv.stop()


def case_headdown(a, c, tmp, times):
    d = job_dir(tmp, "headdown")
    drv = c.exec("n1", a.driver, "2", "150", str(64 * 1024), "50", d)
    wait_running(d, 2)
    time.sleep(0.5)
    t0 = now_ns()
    c.link("head", "down")
    time.sleep(5)
    c.link("head", "up")
    rc = drv.wait(120)
    assert rc == 0, f"driver exited {rc}:\n{drv.text()[-4000:]}"
    reports = read_reports(d)
    assert all(reports[r][0] == "ok" and reports[r][4] == "150" for r in range(2)), \
        f"reports: {reports}"
    times.append(("headdown: cut -> job done (150 allreduces, 5 s cut)", (now_ns() - t0) / 1e9))
    # the nodes are back with the head
    end = time.monotonic() + BOUND_S
    while c.status() != {"n1", "n2"}:
        assert time.monotonic() < end, "the nodes did not rejoin the head"
        time.sleep(0.2)


CASES = {  # name: (function, nodes, subnet index)
    "down": (case_down, 3, 21),
    "elastic": (case_elastic, 3, 22),
    "block": (case_block, 3, 23),
    "slow": (case_slow, 3, 24),
    "headdown": (case_headdown, 2, 25),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tool", required=True)
    p.add_argument("--node-bin", required=True)
    p.add_argument("--driver", required=True)
    p.add_argument("--elastic-driver", required=True)
    p.add_argument("--repeat", type=int, default=1, help="run each case N times in a row")
    p.add_argument("cases", nargs="*", help=", ".join(CASES) + " (default: all)")
    a = p.parse_args()
    why = nt.can_run()
    if why:
        print(f"SKIP: {why}")
        return 77
    tmp = tempfile.mkdtemp(prefix="netfault_test.")
    os.chmod(tmp, 0o755)
    passed = failed = 0
    for case in a.cases or list(CASES):
        fn, nodes, subnet = CASES[case]
        for i in range(a.repeat):
            name = "nf" + secrets.token_hex(2)
            start = time.monotonic()
            print(f"=== {case} #{i + 1} (cluster {name})", flush=True)
            times = []
            c = None
            try:
                c = Cluster(a, tmp, name, subnet, nodes=nodes)
                fn(a, c, tmp, times)
                passed += 1
                for what, s in times:
                    print(f"DETECT {case} {what}: {s:.2f} s")
                print(f"--- {case}: passed in {time.monotonic() - start:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001 (report and go on)
                failed += 1
                for what, s in times:
                    print(f"DETECT {case} {what}: {s:.2f} s")
                print(f"--- {case}: FAILED after {time.monotonic() - start:.1f} s: {e}", flush=True)
                if c:
                    c.up.stop()
                    print(c.node_logs())
            finally:
                if c:
                    c.close()
                else:
                    down_if_left(a, name)
                try:
                    nt.assert_clean(name, wait=5)
                except AssertionError as e:
                    failed += 1
                    print(f"--- {case}: cleanup: {e}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
