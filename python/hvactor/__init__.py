"""hvactor: Horovod-style distributed training on an actor runtime.

``import hvactor.torch as hvd`` is a drop-in for ``horovod.torch``: a
program written for Horovod runs unchanged under ``hvactor-run -np N python
train.py``.
"""

__version__ = "0.1.0"

import sys as _sys

try:
    import torch as _torch  # noqa: F401 (the extension needs LibTorch loaded)
except ImportError as _e:
    raise ImportError(
        f"hvactor needs PyTorch, which {_sys.executable} cannot import ({_e}); hvactor's "
        "extension was built for Debian's python3-torch: run /usr/bin/python3 (or the "
        "interpreter CMake reported as 'hvactor: Python package')") from None

from hvactor.executor import Executor, Future, WorkerError, get, init  # noqa: F401,E402
