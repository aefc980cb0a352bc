#!/usr/bin/env python3
"""loopback_test.py BUILD_DIR: the exact command lines of deploy/kubernetes,
run as local processes on loopback, as the pods would run them.

From the manifests: the head StatefulSet's container, the DaemonSet's init
container and container (twice: two Kubernetes nodes), the driver Job's
container. Substituted, and nothing else: the downward-API variables
($(POD_IP)=127.0.0.1, $(POD_NAME)=hvactor-head-0, $(NODE_NAME)=k8s-n1/k8s-n2,
$(CPUS)=2 from the limit), the Service name hvactor-head:6380 and port 6380
(a free port here), /pki (the Secret's mount: a directory made with the
README's `hvactor-node certs` command), and the image's paths of the
binaries. Checks: the nodes wait for the head and join it, `status` lists
all three, the driver Job's hvactor-run finishes 4 ranks, nothing is left.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

BUILD = os.path.realpath(sys.argv[1])
HERE = os.path.dirname(os.path.realpath(__file__))
MANIFESTS = os.path.join(HERE, "..", "..", "deploy", "kubernetes")
NODE = os.path.join(BUILD, "tools", "hvactor-node")
BINARIES = {
    "hvactor-node": NODE,
    "hvactor-run": os.path.join(BUILD, "tools", "hvactor-run"),
    "/usr/local/libexec/hvactor/spmd_train": os.path.join(BUILD, "examples", "spmd_train"),
}


def load(name):
    with open(os.path.join(MANIFESTS, name)) as f:
        return yaml.safe_load(f)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def command_of(container, variables, port, pki):
    """The container's command + args as the kubelet would run them."""
    argv = list(container.get("command", [])) + list(container.get("args", []))
    out = []
    for a in argv:
        a = str(a)
        for k, v in variables.items():
            a = a.replace("$(%s)" % k, v)
        a = a.replace("hvactor-head:6380", "127.0.0.1:%d" % port)
        a = "%d" % port if a == "6380" else a
        a = a.replace("/pki/", pki + "/")
        for image_path, local in BINARIES.items():
            if a == image_path:
                a = local
            a = re.sub(r"(^|\s)%s(\s|$)" % re.escape(image_path), r"\g<1>%s\g<2>" % local, a)
        out.append(a)
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="hvactor-k8s-")
    pki = os.path.join(tmp, "pki")
    procs = []
    failures = []
    try:
        # The Secret, made as the README says.
        subprocess.run([NODE, "certs", "--dir", pki, "head", "node", "driver"], check=True,
                       stdout=subprocess.DEVNULL)
        port = free_port()
        head = load("head-statefulset.yaml")["spec"]["template"]["spec"]["containers"][0]
        ds = load("node-daemonset.yaml")["spec"]["template"]["spec"]
        job = load("driver-job.yaml")["spec"]["template"]["spec"]["containers"][0]
        head_cmd = command_of(head, {"POD_IP": "127.0.0.1", "POD_NAME": "hvactor-head-0"}, port, pki)
        print("head:", " ".join(head_cmd))
        log = open(os.path.join(tmp, "head.log"), "w")
        procs.append(subprocess.Popen(head_cmd, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
        nodes = []
        for name in ("k8s-n1", "k8s-n2"):
            vars_ = {"POD_IP": "127.0.0.1", "NODE_NAME": name, "CPUS": "2"}
            init = command_of(ds["initContainers"][0], vars_, port, pki)
            # The init container waits until the head answers.
            r = subprocess.run(["timeout", "30"] + init, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append("init container of %s: exit %d: %s" % (name, r.returncode, r.stdout[-300:]))
            cmd = command_of(ds["containers"][0], vars_, port, pki)
            print("node:", " ".join(cmd))
            nlog = open(os.path.join(tmp, name + ".log"), "w")
            p = subprocess.Popen(cmd, stdout=nlog, stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            nodes.append(p)
        status = [NODE, "status", "--address", "127.0.0.1:%d" % port, "--tls-cert",
                  pki + "/driver.pem", "--tls-key", pki + "/driver.key", "--tls-ca", pki + "/ca.pem"]
        listed = ""
        for _ in range(150):
            listed = subprocess.run(status, capture_output=True, text=True).stdout
            if all(n in listed for n in ("hvactor-head-0", "k8s-n1", "k8s-n2")):
                break
            time.sleep(0.2)
        else:
            failures.append("status never listed the head and both nodes:\n" + listed)
        print(listed)
        driver = command_of(job, {}, port, pki)
        print("driver job:", " ".join(driver))
        r = subprocess.run(["timeout", "120"] + driver, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append("driver Job exit %d: %s" % (r.returncode, r.stderr[-500:]))
        else:
            print("driver Job: exit 0, %d lines" % len(r.stdout.splitlines()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 15
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                failures.append("pid %d ignored SIGTERM" % p.pid)
        left = subprocess.run(["pgrep", "-f", pki], capture_output=True, text=True).stdout.split()
        if left:
            failures.append("processes left: " + " ".join(left))
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("loopback_test: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
