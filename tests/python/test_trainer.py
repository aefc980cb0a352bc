"""hvactor.train.HorovodTrainer (Ray Train's) from Python: datasets from
tensors, reports, checkpoints, a restart after a worker exits."""

import ast
import os
import subprocess
import sys

from launcher import HERE


def test_fit_restarts_from_the_last_checkpoint(tmp_path):
    p = subprocess.run([sys.executable, f"{HERE}/trainer_driver.py", str(tmp_path)],
                       capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    r = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            key, _, rest = line[7:].partition(" ")
            r[key] = rest
    metrics = ast.literal_eval(r["metrics"])
    # 10 rows over 2 workers: 5 each; the allreduce sums every row (0..9).
    assert metrics["epoch"] == 2 and metrics["rows"] == 5 and metrics["total"] == 45.0, out
    assert metrics["attempt"] == 1 and metrics["size"] == 2 and metrics["rank"] == 0, out
    # Epoch 1 failed on rank 1 before its report; the restart resumed there.
    assert r["epochs"] == "[0, 1, 2]", out
    assert r["checkpoint"].startswith(str(tmp_path / "run" / "checkpoint_")), out
    assert os.path.exists(os.path.join(r["checkpoint"], "state.pt")), out
    assert r["error"] == "None", out
    assert "oops" in r["bad"] and "object" in r["bad"], out
    assert "dict of columns" in r["baddata"], out
