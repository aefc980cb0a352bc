"""Runs hvactor-run for the tests that start jobs themselves
(test_elastic.py, test_cli.py): HVACTOR_RUN names it (set by ctest)."""

import os
import re
import subprocess
import sys

HVACTOR_RUN = os.environ.get("HVACTOR_RUN", "hvactor-run")
HERE = os.path.dirname(os.path.abspath(__file__))


def run(args, timeout=180, cwd=None, env=None):
    """hvactor-run ARGS; returns the CompletedProcess (text)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([HVACTOR_RUN] + list(args), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=e)


def rank_lines(stdout, prefix):
    """The text of every forwarded rank line starting with `prefix`."""
    out = []
    for line in stdout.splitlines():
        m = re.search(r"\]<stdout>:(.*)$", line)
        if m and m.group(1).startswith(prefix):
            out.append(m.group(1))
    return out


PYTHON = sys.executable
