#!/usr/bin/env python3
"""dashboard_guard_test.py: the head's dashboard against abusive clients and
a second head, with real hvactor-node processes (no workers, no browser).

    python3 dashboard_guard_test.py --node-bin build/tools/hvactor-node [--case NAME]...

Cases:
  port      a second head given the first head's --dashboard-port exits
            non-zero, saying the port is taken (cpp-httplib's SO_REUSEPORT
            once let both listen, each answering some requests); without
            --dashboard-port, when the default port 8265 is held by a listener
            with SO_REUSEPORT, the head warns and runs without a dashboard
            (skipped when something else listens on 8265).
  http      keep-alive, two pipelined requests, HEAD; a request with a body
            gets 413.
  memory    4 connections each sending a 48 MiB request line, then 4 sending
            48 MiB of headers: the head's peak resident memory grows by less
            than 24 MiB (it grew by 208 and 374 MiB), each connection is cut
            off at the 16 KiB header budget, and the dashboard still answers.
  slow      8 idle connections and 6 slowloris ones (a header byte every
            0.5 s): a normal request is answered within 1 s (none was within
            30 s); the 10 s request deadline closes the idle and slow ones
            (between 9 and 13 s); with 300 idle connections open (256 are
            kept) a request is still answered within 1 s.
  tls       off loopback over TLS, without a token: 4 x 48 MiB request lines
            grow the head by less than 24 MiB (193 MiB before); with 8 idle
            TCP connections and 6 handshakes sent a byte at a time, a new
            client's handshake and request with the token is answered within
            1 s (none was within 30 s).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_test import PROCS, get, read_until, start, start_head  # noqa: E402

MiB = 1 << 20
HUGE = 48 * MiB
BUDGET_GROWTH = 24 * MiB


def rss(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for pid {pid}")


def host_port(url):
    m = re.match(r"https?://([^/:]+|\[[^\]]+\]):(\d+)", url)
    assert m, url
    return m.group(1), int(m.group(2))


def timed_get(url, **kw):
    """(status, seconds); status None when the request failed or timed out."""
    t0 = time.monotonic()
    try:
        status = get(url, **kw)[0]
    except (OSError, urllib.error.URLError):
        status = None
    return status, time.monotonic() - t0


def flood(port, make_payload, wrap=None, connections=4):
    """`connections` clients each sending make_payload(); how many the
    server cut off (closed or reset before the whole payload was taken)."""
    cut = []

    def one():
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            if wrap:
                s = wrap(s)
            data = make_payload()
            view, sent = memoryview(data), 0
            while sent < len(data):
                sent += s.send(view[sent:sent + MiB])
            # Sent in full: the server buffers it (or waits for more).
            s.settimeout(15)
            try:
                s.recv(1)
            except (socket.timeout, OSError):
                pass
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            cut.append(1)
        finally:
            s.close()
    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return len(cut)


def huge_line():
    return b"GET /" + b"A" * HUGE


def huge_headers():
    line = b"X-Filler: " + b"B" * 4000 + b"\r\n"
    return b"GET / HTTP/1.1\r\nHost: x\r\n" + line * (HUGE // len(line))


def measure_flood(head, port, payload, wrap=None):
    before = rss(head.pid)
    cut = flood(port, payload, wrap)
    growth = rss(head.pid, "VmHWM") - before
    return before, growth, cut


def case_memory(a):
    head, base, _ = start_head(a.node_bin)
    assert get(base + "/api/cluster")[0] == 200
    port = host_port(base)[1]
    for name, payload in (("request line", huge_line), ("headers", huge_headers)):
        before, growth, cut = measure_flood(head, port, payload)
        print(f"memory: 4 x 48 MiB {name}: RSS {before / MiB:.0f} MiB, peak growth "
              f"{growth / MiB:.1f} MiB, {cut}/4 connections cut off")
        assert growth < BUDGET_GROWTH, f"the head grew by {growth / MiB:.0f} MiB ({name})"
        assert cut == 4, f"only {cut} of 4 oversized {name}s were cut off"
    status, took = timed_get(base + "/api/cluster")
    assert status == 200 and took < 1, (status, took)
    stop(head)
    print("memory: ok")


def slowloris(port, stop_flag, closed_at, wrap_bytes=None):
    """Sends a header byte every 0.5 s until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.monotonic()
    data = wrap_bytes or (b"GET /api/cluster HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 1000)
    try:
        for i in range(len(data)):
            if stop_flag.is_set():
                return
            s.send(data[i:i + 1])
            time.sleep(0.5)
    except OSError:
        closed_at.append(time.monotonic() - t0)
    finally:
        s.close()


def idle(port, n):
    socks = []
    for _ in range(n):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return socks


def closed_by_server(s, timeout):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def responses(sock, count, timeout=5):
    """The status codes of `count` responses read from sock (Content-Length
    framed), or fewer when it closes."""
    sock.settimeout(timeout)
    data, codes = b"", []
    while len(codes) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1")
            length = int(re.search(r"(?i)content-length: *(\d+)", head).group(1))
            if len(data) >= end + 4 + length:
                codes.append(int(head.split()[1]))
                data = data[end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return codes


def case_http(a):
    """What a browser and Prometheus do still works on the new reading loop:
    keep-alive, two pipelined requests, HEAD; a body is refused."""
    head, base, _ = start_head(a.node_bin)
    port = host_port(base)[1]
    get_req = b"GET /api/nodes HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(get_req)
        assert responses(s, 1) == [200]
        s.sendall(get_req + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        assert responses(s, 2) == [200, 404]
        s.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.settimeout(5)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"\r\n\r\n"), reply[:200]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /api/nodes HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        assert responses(s, 1) == [413]
    stop(head)
    print("http: keep-alive, pipelining, HEAD, a body refused: ok")


def case_slow(a):
    head, base, _ = start_head(a.node_bin)
    port = host_port(base)[1]
    stop_flag, closed_at = threading.Event(), []
    idlers = idle(port, 8)
    lorises = [threading.Thread(target=slowloris, args=(port, stop_flag, closed_at))
               for _ in range(6)]
    for t in lorises:
        t.start()
    t0 = time.monotonic()
    time.sleep(1.5)
    tries = [timed_get(base + "/api/cluster", timeout=30) for _ in range(3)]
    worst = max(t for _, t in tries)
    print(f"slow: 8 idle + 6 slowloris connections: a request took {worst * 1000:.0f} ms")
    assert worst < 1 and all(s == 200 for s, _ in tries), \
        f"requests behind idle and slow connections: {tries}"
    # The request deadline (10 s from accept) closes the idle and slow ones.
    gone = [closed_by_server(s, max(13 - (time.monotonic() - t0), 0.1)) for s in idlers]
    idle_for = time.monotonic() - t0
    for t in lorises:
        t.join(max(13 - (time.monotonic() - t0), 0.1))
    stop_flag.set()
    for s in idlers:
        s.close()
    print(f"slow: idle closed: {sum(gone)}/8 (the last after {idle_for:.1f} s), slowloris "
          f"closed after {', '.join(f'{x:.1f}' for x in sorted(closed_at))} s")
    assert all(gone) and idle_for > 9, "an idle connection outlived the request deadline"
    assert len(closed_at) == 6 and all(9 < x < 13 for x in closed_at), closed_at
    # More connections than are kept: the oldest waiting one makes room.
    crowd = idle(port, 300)
    status, took = timed_get(base + "/api/cluster", timeout=30)
    print(f"slow: 300 idle connections open: a request took {took * 1000:.0f} ms")
    assert status == 200 and took < 1, (status, took)
    for s in crowd:
        s.close()
    stop(head)
    print("slow: ok")


def case_tls(a, tmp):
    certs = os.path.join(tmp, "certs")
    subprocess.run([a.node_bin, "certs", "--dir", certs, "head", "client"], check=True,
                   capture_output=True, timeout=60)
    tls = ["--tls-cert", f"{certs}/head.pem", "--tls-key", f"{certs}/head.key",
           "--tls-ca", f"{certs}/ca.pem"]
    head, url, _ = start_head(a.node_bin, "--dashboard-host", "0.0.0.0", *tls)
    m = re.fullmatch(r"https://0\.0\.0\.0:(\d+)/\?token=([0-9a-f]{32})", url)
    assert m, url
    port, token = int(m.group(1)), m.group(2)
    ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
    ctx.check_hostname = False
    wrap = lambda s: ctx.wrap_socket(s)  # noqa: E731
    base = f"https://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    assert get(base + "/api/cluster", ctx, auth)[0] == 200
    before, growth, cut = measure_flood(head, port, huge_line, wrap)
    print(f"tls: 4 x 48 MiB request lines without a token: RSS {before / MiB:.0f} MiB, "
          f"peak growth {growth / MiB:.1f} MiB, {cut}/4 cut off")
    assert growth < BUDGET_GROWTH, f"the head grew by {growth / MiB:.0f} MiB"
    assert cut == 4, cut
    stop_flag, closed_at = threading.Event(), []
    idlers = idle(port, 8)
    hello = bytes.fromhex("16030100c8010000c40303") + os.urandom(200)
    lorises = [threading.Thread(target=slowloris, args=(port, stop_flag, closed_at, hello))
               for _ in range(6)]
    for t in lorises:
        t.start()
    time.sleep(1.5)
    status, took = timed_get(base + "/api/cluster", context=ctx, headers=auth, timeout=30)
    print(f"tls: 8 idle + 6 slow handshakes: a handshake and request took {took * 1000:.0f} ms")
    assert status == 200 and took < 1, (status, took)
    stop_flag.set()
    for t in lorises:
        t.join(5)
    for s in idlers:
        s.close()
    stop(head)
    print("tls: ok")


def case_port(a):
    first, base, _ = start_head(a.node_bin)
    port = host_port(base)[1]
    second = start([a.node_bin, "--head", "--port", "0", "--node-id", "second",
                    "--dashboard-port", str(port)])
    try:
        out, _ = second.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        second.kill()
        out, _ = second.communicate()
        raise AssertionError(f"a second head started on taken port {port}:\n{out}")
    assert second.returncode != 0, f"a second head started on taken port {port}:\n{out}"
    assert f"127.0.0.1:{port}" in out and "taken" in out, out
    assert get(base + "/api/cluster")[0] == 200
    stop(first)
    print(f"port: ok (the second head exited {second.returncode}: "
          f"{[l for l in out.splitlines() if 'taken' in l][0].strip()})")
    # The default port taken by a listener that set SO_REUSEPORT, as a head
    # served by cpp-httplib's defaults did: the head warns and runs without.
    # (Never beside a live listener: it would get some of that one's clients.)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        socket.create_connection(("127.0.0.1", 8265), timeout=1).close()
        raise OSError("8265 has a listener")
    except ConnectionRefusedError:
        pass
    except OSError:
        holder.close()
        print("port: default-port case skipped (8265 is taken on this machine)")
        return
    try:
        holder.bind(("127.0.0.1", 8265))
    except OSError:
        holder.close()
        print("port: default-port case skipped (8265 is taken on this machine)")
        return
    holder.listen(5)
    try:
        two = start([a.node_bin, "--head", "--port", "0", "--node-id", "two"])
        _, lines = read_until(two, r"head 'two' listening")
        text = "\n".join(lines)
        assert "dashboard at" not in text and "without its dashboard" in text, text
        stop(two)
    finally:
        holder.close()
    print("port: default port taken: a warning and no dashboard: ok")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node-bin", required=True)
    ap.add_argument("--case", action="append", choices=["port", "http", "memory", "slow", "tls"])
    a = ap.parse_args()
    cases = a.case or ["port", "http", "memory", "slow", "tls"]
    tmp = tempfile.mkdtemp(prefix="dashboard_guard_test.")
    failed = []
    try:
        for name in cases:
            try:
                {"port": lambda: case_port(a), "http": lambda: case_http(a),
                 "memory": lambda: case_memory(a),
                 "slow": lambda: case_slow(a), "tls": lambda: case_tls(a, tmp)}[name]()
            except Exception as e:  # noqa: BLE001 -- every case runs and is reported
                failed.append(name)
                print(f"{name}: FAILED: {type(e).__name__}: {e}")
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        sys.exit(f"dashboard_guard_test: failed: {', '.join(failed)}")
    print("dashboard_guard_test: all cases passed")


if __name__ == "__main__":
    main()
