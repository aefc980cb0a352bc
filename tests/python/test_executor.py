"""hvactor.Executor (horovod.ray's RayExecutor from Python): a driver
script run as its users run it, in a process of its own."""

import subprocess
import sys

from launcher import HERE


def driver(*args):
    p = subprocess.run([sys.executable, f"{HERE}/executor_driver.py", *args],
                       capture_output=True, text=True, timeout=180)
    checks = {}
    for line in p.stdout.splitlines():
        if line.startswith("CHECK "):
            key, _, rest = line[6:].partition(" ")
            checks[key] = rest
    return p, checks


def test_run_execute_errors_and_cleanup():
    p, c = driver()
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert c["run"] == "[(0, 2, '0', 2.0), (1, 2, '1', 2.0)]", out
    assert c["remote"] == "[42, 42]", out
    assert c["execute"] == "[12, 12] 12", out
    assert c["error"] == "True True", out
    assert "is not callable" in c["not-callable"], out
    assert c["left"] == "[]", out


def test_killed_worker_fails_the_call_and_leaves_nothing():
    p, c = driver("kill")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert c["killed"].endswith("True"), out
    assert c["left"] == "[]", out
