#!/usr/bin/env python3
"""loopback_test.py --hvactor-node P --hvactor-run P [--program P] [--pod-ip IP|auto]

deploy/kubernetes's pods as local processes, started the way the kubelet
would start them: each container's command + args with $(VAR) expanded from
its own env (downward API: $(POD_IP), $(POD_NAME), $(NODE_NAME), $(CPUS) from
limits.cpu), its env passed on, its volumes mounted (the Secret's items
copied from a directory made by `hvactor-node certs`, emptyDirs empty).
What is changed beyond that, because there is no cluster: the Service name
hvactor-head:6380 becomes POD_IP:PORT (a free port: other suites may hold
6380), each mount path a directory here, and /usr/local/ a directory holding
links to the build's binaries (the image's layout, see the Dockerfile).

Checks: a node's init container (hvactor-node wait) keeps waiting while
there is no head and exits 0 once there is one; the head and two nodes
(Kubernetes nodes k8s-n1, k8s-n2) run; `hvactor-node wait --nodes` and
`hvactor-node status` with the driver's identity see all three; with
--program, the driver Job's container runs its 4 ranks; after SIGTERM
nothing started here is left. --pod-ip auto uses this machine's
first non-loopback address (as a pod's IP: in no certificate's names).
Exit 77 without PyYAML or, for auto, without such an address.
"""
import argparse
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is needed")
    sys.exit(77)

MANIFESTS = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "deploy",
                         "kubernetes")
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def load(name):
    with open(os.path.join(MANIFESTS, name)) as f:
        return yaml.safe_load(f)["spec"]["template"]["spec"]


def non_loopback_ip():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpus(quantity, divisor):
    """resourceFieldRef: ceil(limit / divisor), as the kubelet computes it."""
    def value(q):
        return float(q[:-1]) / 1000 if str(q).endswith("m") else float(q)
    return str(math.ceil(value(quantity) / value(divisor)))


class Env:
    """The test's stand-in for one node of a cluster and the kubelet."""

    def __init__(self, tmp, pod_ip, port):
        self.tmp, self.pod_ip, self.port = tmp, pod_ip, port
        self.secret = os.path.join(tmp, "secret")
        self.image = os.path.join(tmp, "image")
        self.procs = []

    def rewrite(self, s, mounts):
        s = s.replace("hvactor-head:6380", "%s:%d" % (self.pod_ip, self.port))
        if s == "6380":
            s = str(self.port)
        for mount, local in mounts.items():
            s = re.sub(re.escape(mount) + r"(?=/|\s|$)", local, s)
        return s.replace("/usr/local/", self.image + "/usr/local/")

    def volume(self, pod, spec, name):
        vol = next(v for v in spec["volumes"] if v["name"] == name)
        d = os.path.join(self.tmp, "pods", pod, name)
        if os.path.isdir(d):  # already made for another container of the pod
            return d
        os.makedirs(d)
        if "secret" in vol:
            for item in vol["secret"]["items"]:
                dst = os.path.join(d, item["path"])
                shutil.copy(os.path.join(self.secret, item["key"]), dst)
                os.chmod(dst, vol["secret"].get("defaultMode", 0o644))
        elif "emptyDir" not in vol:
            fail("volume %s: only secret and emptyDir are emulated" % name)
        return d

    def start(self, pod, spec, container, downward):
        """Popen of the container as the kubelet would start it."""
        env = {}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "fieldRef" in e["valueFrom"]:
                env[e["name"]] = downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                ref = e["valueFrom"]["resourceFieldRef"]
                assert ref["resource"] == "limits.cpu", ref
                limit = container.get("resources", {}).get("limits", {}).get("cpu")
                env[e["name"]] = cpus(limit, ref.get("divisor", "1")) if limit else str(os.cpu_count())
        argv = []
        for a in container.get("command", []) + container.get("args", []):
            # The kubelet's expansion: $(VAR) of a defined VAR; others stay.
            argv.append(re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                               lambda m: env.get(m.group(1), m.group(0)), str(a)))
        for a in argv:
            if "$(" in a:
                fail("%s/%s: undefined variable in %r" % (pod, container["name"], a))
        mounts = {m["mountPath"]: self.volume(pod, spec, m["name"])
                  for m in container.get("volumeMounts", [])}
        argv = [self.rewrite(a, mounts) for a in argv]
        penv = {k: v for k, v in os.environ.items() if not k.startswith(("HVACTOR_", "HOROVOD_"))}
        penv.update({k: self.rewrite(v, mounts) for k, v in env.items()})
        penv["PATH"] = self.image + "/usr/local/bin:" + penv.get("PATH", "/usr/bin:/bin")
        log = open(os.path.join(self.tmp, "%s.%s.log" % (pod, container["name"])), "w+")
        print("%s/%s: %s" % (pod, container["name"], " ".join(argv)), flush=True)
        p = subprocess.Popen(argv, env=penv, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        p.log = log
        self.procs.append(p)
        return p


def output(p):
    p.log.seek(0)
    return p.log.read()


def link(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.symlink(os.path.realpath(src), dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hvactor-node", required=True)
    ap.add_argument("--hvactor-run", required=True)
    ap.add_argument("--program", default="", help="the driver Job's spmd_train (skipped if empty)")
    ap.add_argument("--pod-ip", default="127.0.0.1")
    o = ap.parse_args()
    pod_ip = non_loopback_ip() if o.pod_ip == "auto" else o.pod_ip
    if not pod_ip:
        print("SKIP: no non-loopback IPv4 address on this machine")
        return 77
    head = load("head-statefulset.yaml")
    ds = load("node-daemonset.yaml")
    job = load("driver-job.yaml")
    tmp = tempfile.mkdtemp(prefix="hvactor-k8s-")
    k = Env(tmp, pod_ip, free_port())
    try:
        # The image: /usr/local/bin/hvactor-*, /usr/local/libexec/hvactor/*.
        link(o.hvactor_node, k.image + "/usr/local/bin/hvactor-node")
        link(o.hvactor_run, k.image + "/usr/local/bin/hvactor-run")
        if o.program:
            link(o.program, k.image + "/usr/local/libexec/hvactor/" + os.path.basename(o.program))
        # The Secret's files, made with the command in docs/clusters/kubernetes.md.
        subprocess.run([o.hvactor_node, "certs", "--dir", k.secret, "head", "node", "driver"],
                       check=True, stdout=subprocess.DEVNULL)
        nodes = {n: ("hvactor-node-" + n, {"status.podIP": pod_ip, "spec.nodeName": n,
                                           "metadata.name": "hvactor-node-" + n})
                 for n in ("k8s-n1", "k8s-n2")}
        # 1. The init container waits while there is no head.
        pod, down = nodes["k8s-n1"]
        init1 = k.start(pod, ds, ds["initContainers"][0], down)
        time.sleep(3)
        if init1.poll() is not None:
            fail("the init container did not wait for the head (exit %s): %s"
                 % (init1.returncode, output(init1)[-300:]))
        # 2. The head; then both nodes' init containers end and the nodes start.
        headp = k.start("hvactor-head-0", head, head["containers"][0],
                        {"status.podIP": pod_ip, "metadata.name": "hvactor-head-0"})
        node_procs = []
        for n, (pod, down) in nodes.items():
            init = init1 if n == "k8s-n1" else k.start(pod, ds, ds["initContainers"][0], down)
            try:
                rc = init.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rc = "none after 30 s"
            if rc != 0:
                fail("%s's init container: exit %s: %s" % (n, rc, output(init)[-300:]))
            node_procs.append(k.start(pod, ds, ds["containers"][0], down))
        # 3. status, with the driver's identity, lists all three.
        pki = k.secret + "/"
        status = [o.hvactor_node, "status", "--address", "%s:%d" % (pod_ip, k.port),
                  "--tls-cert", pki + "driver.pem", "--tls-key", pki + "driver.key",
                  "--tls-ca", pki + "ca.pem"]
        # Ready means joined: hvactor-node wait (the readiness check of
        # hvactor-run and hvactor-up), then status shows them.
        ready = subprocess.run([o.hvactor_node, "wait", "--nodes", "hvactor-head-0,k8s-n1,k8s-n2",
                                "--timeout", "30"] + status[2:], capture_output=True, text=True)
        listed = subprocess.run(status, capture_output=True, text=True).stdout
        if ready.returncode != 0 or not all(re.search(r"^%s\s" % n, listed, re.M)
                                            for n in ("hvactor-head-0", "k8s-n1", "k8s-n2")):
            fail("status never listed hvactor-head-0, k8s-n1 and k8s-n2: %s" % ready.stderr[-300:])
        print(listed, flush=True)
        for p in [headp] + node_procs:
            if p.poll() is not None:
                fail("%s exited %s: %s" % (p.args[:2], p.returncode, output(p)[-500:]))
        # 4. The driver Job: its container, its env (address, TLS identity).
        if o.program:
            drv = k.start("hvactor-train-x1", job, job["containers"][0], {})
            try:
                rc = drv.wait(timeout=90)
            except subprocess.TimeoutExpired:
                rc = "none after 90 s"
            out = output(drv)
            ranks = [r for r in range(4) if "[1,%d]<stdout>" % r in out]
            if rc != 0 or len(ranks) != 4:
                fail("driver Job: exit %s, output from ranks %s: %s" % (rc, ranks, out[-800:]))
            else:
                print("driver Job: exit 0, output from ranks 0-3, last line: %s"
                      % out.strip().splitlines()[-1])
        else:
            print("skipped: the driver Job (no --program)")
    finally:
        for p in k.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 15
        for p in k.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                fail("%s ignored SIGTERM" % p.args[:2])
        time.sleep(0.5)
        # Workers run from the nodes' work dirs, inside tmp: any process
        # whose command line names tmp was started here.
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if tmp.encode() in f.read():
                        left.append(pid)
            except OSError:
                pass
        if left:
            fail("processes left: " + " ".join(left))
        if failures:
            for p in k.procs:
                print("--- %s (last lines)\n%s" % (" ".join(p.args[:2]), output(p)[-1500:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print("loopback_test: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
