"""hvactor.Executor: horovod.ray's RayExecutor on hvactor's executor.

    import hvactor

    def train(lr):
        import hvactor.torch as hvd
        hvd.init()
        ...
        return hvd.rank()

    if __name__ == "__main__":
        hvactor.init()                       # first: workers start here
        ex = hvactor.Executor(hvactor.Executor.create_settings(timeout_s=30),
                              num_workers=2)
        ex.start()
        print(ex.run(train, kwargs={"lr": 0.1}))   # [0, 1], in rank order
        ex.shutdown()

A worker is this interpreter running this script again: hvactor.init()
turns it into a worker, so put it before anything the driver alone should
do. The first hvactor.init() also starts the driver's script once more,
with hvactor's base library preloaded (its port guard must come before
libc's accept()): what runs before it runs twice. Functions and their arguments travel pickled (cloudpickle when it is
installed, else pickle: then a function must be importable in the
workers, defined above hvactor.init() or in a module). Every node runs the
same interpreter path with the same packages.
"""

import os
import pickle
import sys

from hvactor import _hvactor as _lib

try:
    import cloudpickle as _pickler
except ImportError:  # Debian: python3-cloudpickle (scripts/setup.sh)
    _pickler = pickle

WorkerError = _lib.WorkerError  # a function raised on a worker (a RuntimeError)

_EXECUTABLE = None  # in a worker: the object start(executable_cls) made


def init(address=None, num_cpus=None):
    """Starts this process's runtime (ray.init): an embedded local cluster,
    or joins the hvactor-node cluster at `address` ("HEAD:PORT"; also
    HVACTOR_ADDRESS). In a worker it never returns: the process serves the
    driver's calls from here on."""
    argv = list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
    _preload_base(argv)
    _lib.init_runtime(argv, address or "", int(num_cpus or 0))


def _preload_base(argv):
    """hvactor's port guard refuses unauthenticated peers from inside
    accept(), so its library must come before libc, which an extension
    module loaded by Python never does: the first init() starts this
    program again with the library in LD_PRELOAD (its workers inherit it)."""
    if _lib.accept_guarded():
        return
    base = _lib.base_library()
    if not base or os.environ.get("HVACTOR_PRELOADED") == base:
        raise RuntimeError(f"hvactor.init: accept() is not hvactor's port guard even with "
                           f"LD_PRELOAD={base!r}")
    env = dict(os.environ, HVACTOR_PRELOADED=base)
    env["LD_PRELOAD"] = base + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def _check_version(driver):
    """Pickled functions run only in the interpreter version that pickled
    them."""
    here = tuple(sys.version_info[:2])
    if tuple(driver) != here:
        raise RuntimeError(f"this worker runs Python {here[0]}.{here[1]} but the driver "
                           f"{driver[0]}.{driver[1]}: every node needs the driver's interpreter "
                           f"({sys.executable})")


def _worker_call(payload):
    version, fn, args, kwargs = pickle.loads(payload)
    _check_version(version)
    return _pickler.dumps(fn(*args, **kwargs))


def _make_executable(cls, args, kwargs):
    global _EXECUTABLE
    _EXECUTABLE = cls(*args, **kwargs)


def _on_executable(fn):
    return fn(_EXECUTABLE)


class Future:
    """One worker's result of run_remote(): result() waits for it."""

    def __init__(self, inner):
        self._inner = inner

    def ready(self):
        return self._inner.ready()

    def result(self):
        return pickle.loads(self._inner.get())


def get(futures):
    """The results of run_remote()'s futures, in order (ray.get)."""
    return [f.result() for f in futures]


class Executor:
    """A group of worker processes that run Python functions together
    (horovod.ray.RayExecutor): gang-placed, each with Horovod's
    environment, so functions can call hvactor.torch's hvd.init()."""

    @staticmethod
    def create_settings(timeout_s=30, placement_group_timeout_s=100, **ignored):
        """RayExecutor.create_settings: the control plane's and placement's
        timeouts (ssh_identity_file, ssh_str and nics do not apply)."""
        return {"timeout_s": timeout_s, "placement_group_timeout_s": placement_group_timeout_s}

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None, min_workers=None,
                 max_workers=None, reset_limit=None, env=None, **ignored):
        if not _lib.runtime_started():
            init()
        options = {"num_workers": num_workers, "num_hosts": num_hosts,
                   "num_workers_per_host": num_workers_per_host if num_hosts else None,
                   "cpus_per_worker": cpus_per_worker, "use_gpu": use_gpu,
                   "gpus_per_worker": gpus_per_worker, "min_workers": min_workers,
                   "max_workers": max_workers, "reset_limit": reset_limit, "env": env or {}}
        self._ex = _lib.CppExecutor(settings or self.create_settings(), options)

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None):
        """Starts the workers; with `executable_cls`, each builds one
        object of it for execute()."""
        self._ex.start()
        if executable_cls is not None:
            self.run(_make_executable, args=[executable_cls, executable_args or [],
                                             executable_kwargs or {}])

    def _payload(self, fn, args, kwargs):
        if not callable(fn):
            raise ValueError(f"{fn!r} is not callable")
        return _pickler.dumps((tuple(sys.version_info[:2]), fn, list(args or []),
                               dict(kwargs or {})))

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) on every worker; the results in rank order."""
        return [pickle.loads(r) for r in self._ex.run(self._payload(fn, args, kwargs))]

    def run_remote(self, fn, args=None, kwargs=None):
        """run() without waiting: a Future per worker (hvactor.get them)."""
        return [Future(f) for f in self._ex.run_remote(self._payload(fn, args, kwargs))]

    def execute(self, fn, callbacks=None):
        """fn(executable) on every worker's object from start()."""
        return self.run(_on_executable, args=[fn])

    def execute_single(self, fn):
        """execute() on rank 0 only."""
        return self.run_remote(_on_executable, args=[fn])[0].result()

    @property
    def num_workers(self):
        return self._ex.num_workers()

    def worker_pids(self):
        return self._ex.worker_pids()

    def shutdown(self):
        """Stops every worker; idempotent."""
        self._ex.shutdown()
