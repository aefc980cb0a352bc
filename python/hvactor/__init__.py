"""hvactor: Horovod-style distributed training on an actor runtime.

``import hvactor.torch as hvd`` is a drop-in for ``horovod.torch``: a
program written for Horovod runs unchanged under ``hvactor-run -np N python
train.py``.
"""

__version__ = "0.1.0"

from hvactor.executor import Executor, Future, WorkerError, get, init  # noqa: F401,E402
