"""hvd.elastic under hvactor-run: a SIGKILLed rank, the survivors resume
from the last commit, a replacement joins, and the result is that of an
uninterrupted run."""

import ast

import pytest
import torch

from launcher import HERE, PYTHON, rank_lines, run

EPOCHS, KILL_EPOCH = 8, 3


def reference_weights():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.arange(32.0).reshape(8, 4) / 32
    y = torch.ones(8, 1)
    for _ in range(EPOCHS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_killed_rank_resumes_from_last_commit(tmp_path):
    marker = tmp_path / "killed"
    p = run(["-np", "3", "--min-np", "2", "--max-np", "3", "--blacklist-cooldown-range", "1",
             "2", PYTHON, f"{HERE}/elastic_train.py", str(EPOCHS), str(KILL_EPOCH), str(marker)])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert marker.exists(), out
    assert len(rank_lines(p.stdout, "KILLING")) == 1, out
    assert rank_lines(p.stdout, "RESET"), out  # the survivors reset
    finished = rank_lines(p.stdout, "FINISHED")
    assert len(finished) >= 2, out
    expect = reference_weights()
    for line in finished:
        assert f"epochs={EPOCHS}" in line
        weights = torch.tensor(ast.literal_eval(line.split("weights=")[1]))
        # Not one step more or less: the killed epoch ran again from the
        # commit before it.
        assert torch.allclose(weights, expect, atol=1e-5), line


def test_run_rejects_a_non_state():
    import hvactor.torch as hvd

    @hvd.elastic.run
    def train(state):
        return 1
    with pytest.raises(ValueError, match="State"):
        train(object())
