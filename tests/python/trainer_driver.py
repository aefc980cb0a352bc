"""A driver for test_trainer.py: hvactor.train.HorovodTrainer from Python.
Rank 1 exits in epoch 1 of the first attempt; the group restarts from the
last checkpoint. Prints RESULT lines the test reads."""

import os
import sys
import tempfile

import torch

import hvactor
from hvactor import train
from hvactor.train import Checkpoint, FailureConfig, HorovodTrainer, RunConfig, ScalingConfig


def loop(config):
    import hvactor.torch as hvd
    hvd.init()
    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        start = torch.load(os.path.join(ckpt.path, "state.pt"))["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        total = hvd.allreduce(shard.to_torch()["x"].sum(), op=hvd.Sum)
        d = tempfile.mkdtemp()
        torch.save({"epoch": epoch}, os.path.join(d, "state.pt"))
        if epoch == 1 and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            os._exit(3)
        train.report({"epoch": epoch, "total": total, "rows": shard.count(),
                      "rank": ctx.get_world_rank(), "size": ctx.get_world_size()},
                     checkpoint=Checkpoint.from_directory(d))


def bad_metric_loop():
    train.report({"oops": object()})


if __name__ == "__main__":
    hvactor.init()
    storage = sys.argv[1]
    x = torch.arange(10.0)
    result = HorovodTrainer(
        loop, train_loop_config={"epochs": 3}, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="run", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
        datasets={"train": {"x": x}}).fit()
    print("RESULT metrics", result.metrics, flush=True)
    print("RESULT epochs", [m["epoch"] for m in result.metrics_history], flush=True)
    print("RESULT checkpoint", result.checkpoint.path, flush=True)
    print("RESULT error", result.error, flush=True)
    bad = HorovodTrainer(bad_metric_loop, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(name="bad", storage_path=storage, verbose=0)).fit()
    print("RESULT bad", bad.error, flush=True)
    try:
        HorovodTrainer(loop, datasets={"train": 42})
    except ValueError as e:
        print("RESULT baddata", e, flush=True)
