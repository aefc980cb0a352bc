#!/usr/bin/env python3
"""netcluster_test.py: hvactor-netcluster brings up real hvactor-node
processes in network namespaces behind shaped links, and leaves nothing.

    python3 netcluster_test.py --tool build/tools/netcluster/hvactor-netcluster \
        --node-bin build/tools/hvactor-node --bench build/tools/hvactor-bench

Cases (each one cleans up after itself, also when it fails):
  command    `up -- COMMAND` with 2 nodes at 200mbit: hvactor-node status lists
             both at their 198.18 addresses; a 4 MiB allreduce across the two
             nodes runs at 0.3-1.05 x 25 MB/s (the shaping is real); the
             command's exit status comes back; nothing is left.
  foreground `up --cpus 1` in the foreground: each node pinned to a core of its
             own (the head to all); link down/up cuts and restores a node (and
             it rejoins the head), block/unblock cuts only head<->n2 while
             n1<->n2 passes, rate re-shapes, bad input exits 2; SIGTERM tears
             everything down.
  sigkill    `up` killed with SIGKILL leaves its cluster; `down NAME` removes it.
  train      hvactor::train across the link: shards, checkpoints, a resume.
Exit 77 (ctest: skipped) without root or `ip netns`.
"""
import argparse
import csv
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RATE = 200 * 10**6 // 8  # bytes/s of --link 200mbit
PROBE = ("import socket,sys\n"
         "s=socket.socket(); s.settimeout(1.0)\n"
         "try:\n s.connect((sys.argv[1], 9)); print('reachable')\n"
         "except ConnectionRefusedError: print('reachable')\n"
         "except OSError as e: print('unreachable', e)\n")


class Env:
    def __init__(self, a):
        self.tool, self.node_bin, self.bench = a.tool, a.node_bin, a.bench
        self.train_driver = a.train_driver
        self.tmp = tempfile.mkdtemp(prefix="netcluster_test.")

    def nc(self, *args, timeout=60, check=True):
        """Runs hvactor-netcluster ARGS; returns (rc, output)."""
        r = subprocess.run([self.tool, *args], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
        out = r.stdout + r.stderr
        if check and r.returncode != 0:
            raise AssertionError(f"hvactor-netcluster {' '.join(args)} exited {r.returncode}:\n{out}")
        return r.returncode, out

    def up_args(self, name, *extra):
        return [self.tool, "up", "--name", name, "--nodes", "2", "--link", "200mbit",
                "--node-bin", self.node_bin, "--logs", os.path.join(self.tmp, name), *extra]


def leftovers(name):
    """What of cluster `name` is still on the machine (empty: nothing)."""
    left = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"namespace {line.split()[0]}" for line in ns.splitlines()
             if line.startswith(f"{name}-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
             if re.search(rf"\b(s-)?{name}-", line)]
    d = f"/run/hvactor-netcluster/{name}"
    w = f"/var/tmp/hvactor-netcluster/{name}"
    left += [f"dir {x}" for x in (d, w) if os.path.exists(x)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (d + "/" in cmd or w + "/" in cmd) and int(pid) != os.getpid():
            left.append(f"process {pid}: {cmd[:120]}")
    return left


def assert_clean(name, wait=3.0):
    end = time.monotonic() + wait
    while True:
        left = leftovers(name)
        if not left or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert not left, f"cluster {name} left behind:\n  " + "\n  ".join(left)


class Foreground:
    """A foreground `up`, its output collected by a thread."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    def text(self):
        return "".join(self.lines)

    def wait_up(self, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if "is up" in self.text():
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"up did not come up (rc {self.p.poll()}):\n{self.text()}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.t.join(5)


def cleanup(env, name):
    """Whatever a failed case left: `down` finds it by name."""
    if leftovers(name):
        env.nc("down", name, check=False, timeout=60)


def case_command(env, name):
    csv_path = os.path.join(env.tmp, f"{name}.csv")
    script = (f'hvactor-node status --address "$HVACTOR_ADDRESS" $NETCLUSTER_TLS_ARGS && '
              f'{env.bench} allreduce -b 4 -e 4M -f 4 --iters 8 -w 2 --num-hosts 2 --per-host 1 '
              f'--check --address "$HVACTOR_ADDRESS" $NETCLUSTER_TLS_ARGS --csv {csv_path} '
              f'&& exit 42')
    r = subprocess.run(env.up_args(name, "--subnet-index", "7", "--", "sh", "-c", script),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    print(out)
    assert r.returncode == 42, f"up -- COMMAND exited {r.returncode}, not the command's 42"
    for node, host in (("n1", 11), ("n2", 12)):
        assert re.search(rf"^{node}\s+198\.18\.7\.{host}:\d+", out, re.M), \
            f"status does not list {node} at 198.18.7.{host}"
    with open(csv_path) as f:
        rows = {int(r["size"]): r for r in csv.DictReader(f)}
    # Every result checked, across the link: up to 1 KiB the data rides with
    # the negotiation header, 4-64 KiB too on the small-message lane, above
    # that over Gloo's pairs.
    assert sorted(rows) == [4 << (2 * k) for k in range(11)], sorted(rows)
    wrong = {size: r["wrong"] for size, r in rows.items() if r["wrong"] != "0"}
    assert not wrong, f"allreduce results wrong across the nodes (size: wrong elements): {wrong}"
    big = rows[4 * 1024 * 1024]
    bw = 4 * 1024 * 1024 / (float(big["time_us"]) / 1e6)  # busbw: 2(n-1)/n = 1 at n = 2
    print(f"4 MiB allreduce: {float(big['time_us']) / 1e3:.1f} ms, busbw {bw / 1e6:.1f} MB/s "
          f"= {bw / RATE:.2f} x the 200mbit link (csv busbw {big['busbw']})")
    assert 0.3 * RATE <= bw <= 1.05 * RATE, \
        f"busbw {bw / 1e6:.1f} MB/s is outside 0.3-1.05 x {RATE / 1e6:.0f} MB/s: shaping is off"
    assert_clean(name)


def probe(env, name, src, dst_addr):
    _, out = env.nc("exec", name, src, "--", sys.executable, "-c", PROBE, dst_addr, timeout=20)
    return out.split()[0] if out.split() else out


def expect(env, name, src, dst, addr, want, tries=1):
    for i in range(tries):
        got = probe(env, name, src, addr)
        if got == want:
            return
        time.sleep(0.5)
    raise AssertionError(f"{src} -> {dst} ({addr}): {got}, expected {want}")


def allowed_cores(pid):
    return os.sched_getaffinity(int(pid))


def check_cores(name):
    """With --cpus 1 each node gets a core of its own while the machine
    has one (its workers bind within it); the head keeps every core."""
    with open(f"/run/hvactor-netcluster/{name}/state.json") as f:
        pids = json.load(f)["pids"]
    machine = sorted(os.sched_getaffinity(0))
    head, n1, n2 = (allowed_cores(pids[x]) for x in ("head", "n1", "n2"))
    assert head == set(machine), f"head pinned: {head}"
    if len(machine) >= 2:
        assert n1 == {machine[0]} and n2 == {machine[1]}, f"n1 {n1}, n2 {n2}, machine {machine}"
    else:
        assert n1 == n2 == set(machine), f"n1 {n1}, n2 {n2}"


def case_foreground(env, name):
    fg = Foreground(env.up_args(name, "--cpus", "1"))
    try:
        fg.wait_up()
        check_cores(name)
        a = {"head": "198.18.0.1", "n1": "198.18.0.11", "n2": "198.18.0.12"}
        rc, out = env.nc("up", "--name", name, "--node-bin", env.node_bin, check=False)
        assert rc == 2 and "exists" in out, f"a second up with the same name: {rc} {out}"
        for bad in (["link", name, "n9", "down"], ["link", name, "n1", "rate", "fast"],
                    ["link", name, "n1", "block", "n1"], ["exec", "zz9", "head", "--", "true"]):
            rc, out = env.nc(*bad, check=False)
            assert rc == 2 and len(out.strip().splitlines()) == 1, f"{bad}: {rc} {out}"
        for src, dst in (("head", "n1"), ("head", "n2"), ("n1", "n2")):
            expect(env, name, src, dst, a[dst], "reachable")
        env.nc("link", name, "n1", "down")
        expect(env, name, "head", "n1", a["n1"], "unreachable")
        expect(env, name, "head", "n2", a["n2"], "reachable")
        env.nc("link", name, "n1", "up")
        expect(env, name, "head", "n1", a["n1"], "reachable", tries=6)
        wait = ('hvactor-node wait --address "$HVACTOR_ADDRESS" --nodes n1,n2 --timeout 20 '
                '$NETCLUSTER_TLS_ARGS')
        env.nc("exec", name, "head", "--", "sh", "-c", wait, timeout=40)
        env.nc("link", name, "n2", "block", "head")
        expect(env, name, "head", "n2", a["n2"], "unreachable")
        expect(env, name, "n2", "head", a["head"], "unreachable")
        expect(env, name, "n1", "n2", a["n2"], "reachable")
        expect(env, name, "n2", "n1", a["n1"], "reachable")
        expect(env, name, "head", "n1", a["n1"], "reachable")
        _, out = env.nc("status", name, check=False)
        assert re.search(r"^n2\s.*\shead\s*$", out, re.M), f"status shows no block:\n{out}"
        env.nc("link", name, "head", "unblock", "n2")
        expect(env, name, "head", "n2", a["n2"], "reachable")
        env.nc("link", name, "n1", "rate", "1%")
        for ns, dev in ((f"{name}-n1", f"{name}-n1"), (f"{name}-sw", f"s-{name}-n1")):
            tc = subprocess.run(["tc", "-n", ns, "class", "show", "dev", dev],
                                capture_output=True, text=True).stdout
            assert "rate 2Mbit" in tc, f"{dev} after rate 1%: {tc}"
        fg.stop()
        assert fg.p.returncode == 128 + signal.SIGTERM, \
            f"up after SIGTERM exited {fg.p.returncode}:\n{fg.text()}"
        assert_clean(name)
    finally:
        fg.stop()


def case_sigkill(env, name):
    fg = Foreground(env.up_args(name))
    try:
        fg.wait_up()
        fg.p.kill()
        fg.p.wait()
        assert leftovers(name), "a SIGKILLed up left nothing: this case tests nothing"
        env.nc("down", name)
        assert_clean(name)
        rc, out = env.nc("down", name, check=False)
        assert rc == 2 and "no cluster" in out, f"down of a removed cluster: {rc} {out}"
    finally:
        fg.stop()


def can_run():
    path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(path + [d for d in ("/usr/sbin", "/sbin") if d not in path])
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    probe_ns = f"ncprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add fails: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)
    return None


def case_train(env, name):
    """hvactor::train across the link: the driver on the head (TLS, so no
    same-machine route), a worker on each node. Shards come from the
    driver on its data link, 5 MB checkpoints stream to the head on it; a
    second fit resumes from the first one's checkpoint, which the driver
    streams on the data link too."""
    if not env.train_driver:
        print("no --train-driver: skipped")
        return
    storage = os.path.join(env.tmp, f"{name}-storage")
    common = (f'{env.train_driver} --address "$HVACTOR_ADDRESS" $NETCLUSTER_TLS_ARGS '
              f'--workers 2 --rows 200000 --ckpt-bytes 5000000 --storage {storage}')
    script = (f'{common} --name first --epochs 2 > {storage}.1 && '
              f'{common} --name second --epochs 3 '
              f'--resume "$(sed -n "s/^checkpoint path=\\([^ ]*\\) .*/\\1/p" {storage}.1)" '
              f'> {storage}.2 && exit 42')
    r = subprocess.run(env.up_args(name, "--cpus", "1", "--", "sh", "-c", script),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    outs = []
    for k in (1, 2):
        if os.path.exists(f"{storage}.{k}"):
            with open(f"{storage}.{k}") as f:
                outs.append(f.read())
    print(r.stdout + r.stderr + "\n".join(outs))
    assert r.returncode == 42, f"the fits exited {r.returncode}"
    first, second = outs
    shards = re.findall(r"^shard .*$", first, re.M)
    assert len(shards) == 2, shards
    hosts = set()
    for rank, line in enumerate(shards):
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert fields["rows"] == "100000" and fields["first"] == str(rank * 100000) \
            and fields["consistent"] == "1" and fields["batched"] == "100000", line
        hosts.add(fields["host"])
    assert hosts == {"n1", "n2"}, f"the ranks ran on {hosts}, not one on each node"
    assert re.search(r"^checkpoint path=\S+ epoch=1 intact=1$", first, re.M), first
    # The second fit resumed at epoch 2: its history holds that epoch only.
    epochs = re.findall(r"^history .*epoch=(\d+)", second, re.M)
    assert epochs == ["2"], epochs
    assert re.search(r"^checkpoint path=\S+ epoch=2 intact=1$", second, re.M), second
    assert_clean(name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tool", required=True)
    p.add_argument("--node-bin", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--train-driver", default="")
    p.add_argument("cases", nargs="*", help="command, foreground, sigkill, train (default: all)")
    a = p.parse_args()
    why = can_run()
    if why:
        print(f"SKIP: {why}")
        return 77
    env = Env(a)
    cases = {"command": case_command, "foreground": case_foreground, "sigkill": case_sigkill,
             "train": case_train}
    passed = failed = 0
    for case in a.cases or list(cases):
        name = "nt" + secrets.token_hex(2)
        start = time.monotonic()
        print(f"=== {case} (cluster {name})", flush=True)
        try:
            cases[case](env, name)
            passed += 1
            print(f"--- {case}: passed in {time.monotonic() - start:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 (report and go on with the next case)
            failed += 1
            print(f"--- {case}: FAILED after {time.monotonic() - start:.1f} s: {e}", flush=True)
            logs = os.path.join(env.tmp, name)
            if os.path.isdir(logs):
                for f in sorted(os.listdir(logs)):
                    with open(os.path.join(logs, f), errors="replace") as fh:
                        print(f"----- {f}\n" + "".join(fh.readlines()[-20:]))
        finally:
            cleanup(env, name)
            try:
                assert_clean(name, wait=5)
            except AssertionError as e:
                failed += 1
                print(f"--- {case}: cleanup: {e}", flush=True)
    shutil.rmtree(env.tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
