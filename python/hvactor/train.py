"""hvactor.train: Ray Train's HorovodTrainer on hvactor::train.

    import hvactor
    from hvactor import train
    from hvactor.train import HorovodTrainer, ScalingConfig, RunConfig, Checkpoint

    def loop(config):
        import hvactor.torch as hvd
        hvd.init()
        shard = train.get_dataset_shard("train")
        for epoch in range(config["epochs"]):
            for batch in shard.iter_torch_batches(batch_size=32):
                ...
            train.report({"epoch": epoch, "loss": loss.item()},
                         checkpoint=Checkpoint.from_directory(d))

    if __name__ == "__main__":
        hvactor.init()
        result = HorovodTrainer(loop, train_loop_config={"epochs": 3},
                                scaling_config=ScalingConfig(num_workers=2),
                                datasets={"train": {"x": x, "y": y}}).fit()

The workers are this script again (hvactor.Executor's rule: hvactor.init()
first). Datasets are dicts of columns (torch tensors, NumPy arrays or
lists; the first dimension is the rows) or lists of dicts of numbers; every
worker gets its equal share, as Ray Train splits them.
"""

import contextlib
import pickle
import sys
import shutil
import tempfile

import torch

from hvactor import _hvactor as _lib
from hvactor.executor import _check_version, _pickler, init

__all__ = ["HorovodTrainer", "ScalingConfig", "RunConfig", "FailureConfig", "CheckpointConfig",
           "Checkpoint", "Result", "report", "get_checkpoint", "get_dataset_shard",
           "get_context"]


class ScalingConfig:
    """How many workers and what each holds (ray.train.ScalingConfig)."""

    def __init__(self, num_workers=1, use_gpu=False, resources_per_worker=None,
                 trainer_resources=None, placement_strategy="PACK"):
        res = dict(resources_per_worker or {})
        self.num_workers = num_workers
        self.use_gpu = use_gpu
        self.cpus_per_worker = int(res.get("CPU", 1))
        self.gpus_per_worker = int(res["GPU"]) if "GPU" in res else None


class FailureConfig:
    def __init__(self, max_failures=0):
        self.max_failures = max_failures


class CheckpointConfig:
    def __init__(self, num_to_keep=None):
        self.num_to_keep = num_to_keep


class RunConfig:
    """Where checkpoints go and how failures restart (ray.train.RunConfig)."""

    def __init__(self, name=None, storage_path=None, failure_config=None, checkpoint_config=None,
                 verbose=1):
        self.name = name or ""
        self.storage_path = storage_path or ""
        self.failure_config = failure_config or FailureConfig()
        self.checkpoint_config = checkpoint_config or CheckpointConfig()
        self.verbose = verbose


class Checkpoint:
    """A directory of files (ray.train.Checkpoint)."""

    def __init__(self, path):
        self.path = str(path)

    @classmethod
    def from_directory(cls, path):
        return cls(path)

    @contextlib.contextmanager
    def as_directory(self):
        yield self.path

    def to_directory(self, path=None):
        path = path or tempfile.mkdtemp(prefix="checkpoint_")
        shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    def __repr__(self):
        return f"Checkpoint(path={self.path!r})"


class Result:
    """What fit() returns (ray.train.Result)."""

    def __init__(self, r):
        self.metrics = r["metrics"]
        self.checkpoint = Checkpoint(r["checkpoint"]) if r["checkpoint"] else None
        self.metrics_history = r["metrics_history"]
        self.error = RuntimeError(r["error"]) if r["error"] else None
        self.path = r["path"]

    def __repr__(self):
        return f"Result(metrics={self.metrics}, path={self.path!r}, checkpoint={self.checkpoint})"


def _columns(data, name):
    if isinstance(data, list):  # rows of named numbers
        if not data:
            raise ValueError(f"dataset '{name}' is empty")
        keys = list(data[0])
        for i, row in enumerate(data):
            if list(row) != keys:
                raise ValueError(f"dataset '{name}': row {i} has the columns {list(row)}, "
                                 f"row 0 {keys}")
        data = {k: [row[k] for row in data] for k in keys}
    if not isinstance(data, dict):
        raise ValueError(f"dataset '{name}' must be a dict of columns or a list of dicts, "
                         f"not {type(data).__name__}")
    return {k: torch.as_tensor(v) for k, v in data.items()}


class HorovodTrainer:
    """Runs `train_loop_per_worker` on a group of workers with their shares
    of `datasets`, persists rank 0's checkpoints and restarts after failures
    (ray.train.horovod.HorovodTrainer)."""

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, scaling_config=None,
                 run_config=None, datasets=None, resume_from_checkpoint=None):
        if not callable(train_loop_per_worker):
            raise ValueError("train_loop_per_worker must be callable")
        self._loop = train_loop_per_worker
        self._config = dict(train_loop_config or {})
        self._scaling = scaling_config or ScalingConfig()
        self._run = run_config or RunConfig()
        self._datasets = {k: _columns(v, k) for k, v in (datasets or {}).items()}
        self._resume = resume_from_checkpoint

    def fit(self):
        if not _lib.runtime_started():
            init()
        s, r = self._scaling, self._run
        return Result(_lib.train_fit({
            "loop": _pickler.dumps((tuple(sys.version_info[:2]), self._loop, self._config)),
            "num_workers": s.num_workers, "use_gpu": s.use_gpu,
            "cpus_per_worker": s.cpus_per_worker, "gpus_per_worker": s.gpus_per_worker,
            "name": r.name, "storage_path": r.storage_path,
            "max_failures": r.failure_config.max_failures,
            "num_to_keep": r.checkpoint_config.num_to_keep, "verbose": r.verbose,
            "resume_from_checkpoint": self._resume.path if self._resume else None,
            "datasets": self._datasets}))


# -- inside the training loop ------------------------------------------------------

def _worker_loop(payload):
    version, loop, config = pickle.loads(payload)
    _check_version(version)
    try:
        import inspect
        takes_config = len(inspect.signature(loop).parameters) > 0
    except (TypeError, ValueError):
        takes_config = True
    loop(config) if takes_config else loop()


class _Context:
    def __init__(self, d):
        self._d = d

    def get_world_rank(self):
        return self._d["world_rank"]

    def get_world_size(self):
        return self._d["world_size"]

    def get_local_rank(self):
        return self._d["local_rank"]

    def get_local_world_size(self):
        return self._d["local_world_size"]

    def get_node_rank(self):
        return self._d["node_rank"]

    def get_experiment_name(self):
        return self._d["experiment_name"]

    def get_attempt(self):
        return self._d["attempt"]


def get_context():
    """This worker's place in the run (ray.train.get_context())."""
    return _Context(_lib.train_context())


def report(metrics, checkpoint=None):
    """Sends `metrics` to the driver; rank 0's `checkpoint` directory is
    persisted there. Every worker reports as many times."""
    _lib.train_report(dict(metrics), checkpoint.path if checkpoint else "")


def get_checkpoint():
    """The checkpoint to resume from (after a restart, the latest one), or
    None."""
    path = _lib.train_get_checkpoint()
    return Checkpoint(path) if path else None


class DataShard:
    """This worker's share of a dataset: columns as torch tensors."""

    def __init__(self, columns):
        self.columns = columns

    def count(self):
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def to_torch(self):
        return dict(self.columns)

    def iter_torch_batches(self, batch_size=256, drop_last=False):
        n = self.count()
        for start in range(0, n, batch_size):
            if drop_last and start + batch_size > n:
                return
            yield {k: v[start:start + batch_size] for k, v in self.columns.items()}


def get_dataset_shard(name):
    """This worker's share of the dataset `name`."""
    return DataShard(_lib.train_dataset_shard(name))
