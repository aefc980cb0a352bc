#!/usr/bin/env python3
"""dashboard_test.py: the head's dashboard, its JSON API and /metrics,
against real hvactor-node processes and a real hvactor::train job.

    python3 dashboard_test.py --node-bin build/tools/hvactor-node \
        --train-driver build/tests/integration/train_driver --out DIR

Cases:
  browser   a head and a second node, a 3-rank training run joined to them:
            headless Chromium loads the page and the rendered DOM shows both
            nodes, the job's 3 ranks with their pids and the run's loss plotted
            (a polyline of the reported points); a screenshot is saved in --out.
            /api/nodes matches `hvactor-node status`; /api/jobs shows each
            rank's node, pid, CPU time and memory and the job's allreduces;
            /metrics is Prometheus' text format with the nodes, CPUs, workers,
            collectives and train reports. The driver
            killed with SIGKILL: the job is shown "lost" and its workers are
            gone; a second run to its end is shown "succeeded".
  experiments  the head's page served beside a made-up /api/cluster with
            runs of two tune experiments and a plain run: headless Chromium
            shows each experiment's runs together under a heading naming it
            and counting its trials, the plain run outside any group.
  user      another local user's request to the loopback dashboard is refused
            (closed at accept, or 403), also for /metrics (as root only;
            skipped otherwise).
  offloop   --dashboard-host 0.0.0.0 without TLS: the head refuses to start.
            With TLS: plain HTTP gets nothing, HTTPS without a certificate or
            token is refused (403), a wrong token too, the printed token and
            a client certificate of the cluster CA are let in, a certificate
            of another CA fails the handshake.
"""
import argparse
import html.parser
import http.server
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PROCS = []


def start(cmd, **kw):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, **kw)
    PROCS.append(p)
    return p


def read_until(p, pattern, timeout=30):
    """Lines of p until one matches; (match, lines)."""
    deadline = time.time() + timeout
    lines = []
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            if p.poll() is not None:
                break
            continue
        lines.append(line.rstrip("\n"))
        m = re.search(pattern, line)
        if m:
            return m, lines
    raise AssertionError(f"no line matching {pattern!r} from {p.args[0]}:\n" + "\n".join(lines))


def start_head(node_bin, *extra):
    head = start([node_bin, "--head", "--port", "0", "--node-id", "head", "--num-cpus", "2",
                  "--dashboard-port", "0", *extra])
    dash, _ = read_until(head, r"dashboard at (\S+)")
    ready, _ = read_until(head, r"head 'head' listening on (\S+):(\d+)")
    return head, dash.group(1), f"{ready.group(1)}:{ready.group(2)}"


def get(url, context=None, headers=None, timeout=10):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def api(base, path):
    status, body, _ = get(base + path)
    assert status == 200, f"{path}: {status} {body}"
    return json.loads(body)


def wait_for(what, fn, timeout=60):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (AssertionError, OSError, ValueError) as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise AssertionError("chromium is not installed (scripts/setup.sh installs it)")


def browse(url, out_dir):
    """The DOM after the page's script ran, and a screenshot."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", f"--user-data-dir={out_dir}/chromium-profile",
            "--virtual-time-budget=8000"]
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0, f"chromium --dump-dom failed: {dom.stderr[-2000:]}"
    shot = os.path.join(out_dir, "dashboard.png")
    subprocess.run(base + ["--window-size=1280,1600", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=90)
    assert os.path.getsize(shot) > 10000, "the screenshot is empty"
    return dom.stdout


def status_rows(node_bin, address):
    out = subprocess.run([node_bin, "status", "--address", address], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    rows = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5 and "/" in parts[2]:
            rows[parts[0]] = {"address": parts[1], "cpus": parts[2], "gpus": parts[3]}
    return rows


def parse_metrics(text):
    samples, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)', line)
        assert m, f"not a Prometheus sample: {line!r}"
        assert m.group(1) in typed, f"{m.group(1)} has no # TYPE before it"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return samples


def driver_cmd(a, address, storage, name, epochs):
    return [a.train_driver, "--address", address, "--workers", "3", "--epochs", str(epochs),
            "--storage", storage, "--name", name, "--hold-ms", "250", "--num-to-keep", "2",
            "--allreduce", "1"]


def case_browser(a, tmp):
    head, base, address = start_head(a.node_bin)
    node = start([a.node_bin, "--address", address, "--node-id", "n1", "--num-cpus", "2"])
    read_until(node, r"node 'n1' joined")
    storage = os.path.join(tmp, "runs")
    driver = start(driver_cmd(a, address, storage, "dash", 400), start_new_session=True)

    def running():
        jobs = api(base, "/api/jobs")
        runs = api(base, "/api/runs")
        ok = (jobs and jobs[0]["state"] == "running" and len(jobs[0]["ranks"]) == 3
              and all(r["pid"] > 0 and r["rss_bytes"] > 0 for r in jobs[0]["ranks"])
              and runs and len(runs[0]["points"]) >= 3
              and any(o["op"] == "allreduce" and o["count"] >= 3 and o["bytes"] >= 3 * 4096
                      for o in jobs[0]["collectives"]))
        return (jobs, runs) if ok else None
    jobs, runs = wait_for("a running job with sampled ranks and 3 reports", running, 90)
    job = jobs[0]
    assert {r["node"] for r in job["ranks"]} == {"head", "n1"}, job["ranks"]
    assert job["kind"] == "executor" and job["driver"], job
    assert "loss" in runs[0]["metrics"], runs[0]
    for r in job["ranks"]:
        os.kill(r["pid"], 0)  # a real process of this machine

    dom = browse(base + "/", a.out)
    assert 'data-loaded="1"' in dom, dom[:2000]
    for n in ("head", "n1"):
        assert f'data-node="{n}"' in dom and f">{n}<" in dom, f"node {n} not shown"
    shown = re.findall(r'<tr class="rank" data-rank="(\d+)"', dom)
    assert sorted(shown) == ["0", "1", "2"], shown
    for r in job["ranks"]:
        assert f">{r['pid']}<" in dom, f"pid {r['pid']} not shown"
    plot = re.search(r'data-metric="loss"><svg[^>]*data-points="(\d+)"[^>]*>.*?'
                     r'<polyline class="series"[^>]*points="([^"]+)"', dom, re.S)
    assert plot, "no loss plot in the page"
    assert int(plot.group(1)) >= 3 and len(plot.group(2).split()) == int(plot.group(1))

    rows = status_rows(a.node_bin, address)
    nodes = api(base, "/api/nodes")
    assert set(rows) == {n["node_id"] for n in nodes} == {"head", "n1"}, (rows, nodes)
    for n in nodes:
        row = rows[n["node_id"]]
        assert row["address"] == f"{n['address']}:{n['port']}", (row, n)
        assert row["cpus"].split("/")[1] == str(n["cpus"]["total"]) == "2", (row, n)

    status, text, headers = get(base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(text)
    assert m["hvactor_nodes"][0][1] == 2
    assert {l["node"]: v for l, v in m["hvactor_node_cpus"]} == {"head": 2, "n1": 2}
    assert sum(v for l, v in m["hvactor_workers"] if l["state"] == "running") >= 3
    assert any(v >= 3 for _, v in m["hvactor_train_reports_total"])
    assert any(l["metric"] == "loss" for l, _ in m["hvactor_train_metric"])
    assert len(m["hvactor_worker_cpu_seconds_total"]) >= 3
    assert any(l["op"] == "allreduce" and v >= 3
               for l, v in m["hvactor_collective_operations_total"]), text
    assert any(l["job"] == job["job_id"] for l, _ in m["hvactor_negotiation_stalls_total"])

    # The driver dies: the job is lost, its workers go.
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    lost = wait_for("the job marked lost", lambda: [j for j in api(base, "/api/jobs")
                                                     if j["job_id"] == job["job_id"]
                                                     and j["state"] == "lost"], 30)
    assert any("driver went away" in f for f in lost[0]["failures"]), lost
    def workers_gone():
        for r in job["ranks"]:
            try:
                os.kill(r["pid"], 0)
                return False
            except ProcessLookupError:
                pass
        return True
    wait_for("the killed driver's workers to exit", workers_gone, 30)

    done = subprocess.run(driver_cmd(a, address, storage, "again", 3), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = api(base, "/api/jobs")
    assert jobs[0]["state"] == "succeeded" and jobs[0]["ended_ms"] > 0, jobs[0]
    run = [r for r in api(base, "/api/runs") if r["run"] == "again"][0]
    assert run["reports"] == 3 and [p["iteration"] for p in run["points"]] == [1, 2, 3], run
    assert run["checkpoints"], run
    status, body, _ = get(base + "/api/plot?run=0&metric=nope")
    assert status == 404, status
    status, body, _ = get(base + "/api/plot?run=x&metric=loss")
    assert status == 404, status
    print("browser: ok (screenshot in %s)" % os.path.join(a.out, "dashboard.png"))
    return head, base


class RunGroups(html.parser.HTMLParser):
    """Each run box's enclosing experiment (None outside one), in page order,
    and each experiment's heading text."""

    def __init__(self):
        super().__init__()
        self.divs, self.runs, self.heads, self.head, self.tags = [], [], {}, None, set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag == "div":
            self.divs.append(attrs)
            if "data-run" in attrs:
                groups = [d["data-experiment"] for d in self.divs if "data-experiment" in d]
                self.runs.append((attrs["data-run"], groups[-1] if groups else None))
        if tag == "h3" and "experiment-head" in attrs.get("class", ""):
            self.head = self.divs[-1].get("data-experiment")
            self.heads[self.head] = ""

    def handle_endtag(self, tag):
        if tag == "div":
            self.divs.pop()
        if tag == "h3":
            self.head = None

    def handle_data(self, data):
        if self.head is not None:
            self.heads[self.head] += data


def case_experiments(a, base):
    status, page, _ = get(base + "/")
    assert status == 200, status

    def run(name, experiment):
        return {"job_id": "job-" + name, "run": name, "storage": "/runs/" + name,
                "experiment": experiment, "reports": 2, "metrics": ["loss"],
                "checkpoints": [], "points": [{"iteration": 2, "time_s": 1.0,
                                               "metrics": {"loss": 0.5}}]}
    now = int(time.time() * 1000)
    cluster = {"head": {"node_id": "head", "started_ms": now, "uptime_s": 0, "now_ms": now},
               "totals": {"nodes": 0, "cpus": 0, "cpus_free": 0, "gpus": 0, "gpus_free": 0},
               "nodes": [], "jobs": [],
               "runs": [run("a1", "exp-a"), run("plain", ""), run("b1", "<i>exp-b</i>"),
                        run("a2", "exp-a")]}

    class Fake(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, kind = (page, "text/html") if self.path == "/" else (
                (json.dumps(cluster), "application/json") if self.path.startswith("/api/cluster")
                else (None, None))
            if body is None:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", kind + "; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = os.path.join(a.out, "experiments")
        os.makedirs(out, exist_ok=True)
        dom = browse(f"http://127.0.0.1:{server.server_address[1]}/", out)
    finally:
        server.shutdown()
    assert 'data-loaded="1"' in dom, dom[:2000]
    groups = RunGroups()
    groups.feed(dom)
    assert groups.runs == [("a1", "exp-a"), ("a2", "exp-a"), ("plain", None),
                           ("b1", "<i>exp-b</i>")], groups.runs
    heads = {k: " ".join(v.split()) for k, v in groups.heads.items()}
    assert heads == {"exp-a": "experiment exp-a · 2 trials",
                     "<i>exp-b</i>": "experiment <i>exp-b</i> · 1 trial"}, heads
    assert "i" not in groups.tags, "an experiment's name went into the page as markup"
    print("experiments: ok")


def case_user(base):
    if os.geteuid() != 0:
        print("user: skipped (needs root to run as another user)")
        return
    # Closed at accept (the head's port guard) or answered 403 (the check
    # per request): either way not a byte of the cluster's state.
    probe = ("import sys,urllib.request,urllib.error,http.client\n"
             "try:\n r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status)\n"
             "except urllib.error.HTTPError as e: print(e.code)\n"
             "except (urllib.error.URLError, http.client.HTTPException, OSError): print('closed')\n")
    for path in ("/api/cluster", "/metrics", "/"):
        # The system's interpreter: nobody may not read a user's own (pyenv).
        r = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", probe,
                            base + path], capture_output=True, text=True, timeout=30)
        assert r.stdout.strip() in ("403", "closed"), f"{path} as nobody: {r.stdout} {r.stderr}"
    # The refusals cost the head's own user nothing: the server still answers.
    for _ in range(3):
        assert get(base + "/api/cluster")[0] == 200
    print("user: ok")


def case_offloop(a, tmp):
    r = subprocess.run([a.node_bin, "--head", "--port", "0", "--node-id", "head",
                        "--dashboard-host", "0.0.0.0", "--dashboard-port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "without TLS" in r.stdout + r.stderr, r.stdout + r.stderr
    certs, other = os.path.join(tmp, "certs"), os.path.join(tmp, "other")
    for d in (certs, other):
        subprocess.run([a.node_bin, "certs", "--dir", d, "head", "client"], check=True,
                       capture_output=True, timeout=60)
    tls = ["--tls-cert", f"{certs}/head.pem", "--tls-key", f"{certs}/head.key",
           "--tls-ca", f"{certs}/ca.pem"]
    head, url, _ = start_head(a.node_bin, "--dashboard-host", "0.0.0.0", *tls)
    m = re.fullmatch(r"https://0\.0\.0\.0:(\d+)/\?token=([0-9a-f]{32})", url)
    assert m, url
    port, token = m.group(1), m.group(2)
    base = f"https://127.0.0.1:{port}"

    def ctx(cert=None, ca=certs):
        c = ssl.create_default_context(cafile=f"{ca}/ca.pem" if ca == certs else f"{certs}/ca.pem")
        c.check_hostname = False
        if cert:
            c.load_cert_chain(f"{cert}/client.pem", f"{cert}/client.key")
        return c
    try:
        get(f"http://127.0.0.1:{port}/api/cluster", timeout=5)
        raise AssertionError("plain HTTP was answered")
    except (urllib.error.URLError, ConnectionError, OSError):
        pass
    assert get(base + "/api/cluster", ctx())[0] == 403
    assert get(base + "/metrics", ctx())[0] == 403
    assert get(base + "/api/cluster?token=" + "0" * 32, ctx())[0] == 403
    assert get(base + "/api/cluster", ctx(), {"Authorization": "Bearer nope"})[0] == 403
    status, body, headers = get(base + "/?token=" + token, ctx())
    assert status == 200 and "hvactor_dashboard=" in headers.get("Set-Cookie", ""), headers
    cookie = headers["Set-Cookie"].split(";")[0]
    assert get(base + "/api/cluster", ctx(), {"Cookie": cookie})[0] == 200
    status, body, _ = get(base + "/api/nodes", ctx(), {"Authorization": f"Bearer {token}"})
    assert status == 200 and json.loads(body)[0]["node_id"] == "head", body
    assert get(base + "/metrics", ctx(cert=certs))[0] == 200
    try:
        get(base + "/api/cluster", ctx(cert=other))
        raise AssertionError("a certificate of another CA was let in")
    except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError) as e:
        assert "403" not in str(e)
    head.send_signal(signal.SIGTERM)
    head.wait(timeout=30)
    print("offloop: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node-bin", required=True)
    ap.add_argument("--train-driver", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="dashboard_test.")
    os.chmod(tmp, 0o755)
    try:
        head, base = case_browser(a, tmp)
        case_experiments(a, base)
        case_user(base)
        case_offloop(a, tmp)
    finally:
        for p in PROCS:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM) if p.pid == os.getpgid(p.pid) else p.terminate()
                except ProcessLookupError:
                    pass
        for p in PROCS:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("dashboard_test: all cases passed")


if __name__ == "__main__":
    main()
