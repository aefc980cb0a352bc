"""A driver for test_executor.py: hvactor.Executor from Python, each check
printed as one CHECK line the test reads."""

import os
import signal
import sys
import time

import hvactor


def allreduce_rank(scale):
    import torch

    import hvactor.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    return hvd.rank(), hvd.size(), os.environ["HOROVOD_RANK"], total * scale


class Counter:
    def __init__(self, start):
        self.n = start

    def bump(self):
        self.n += 1
        return self.n


def main():
    hvactor.init()  # workers stop here and serve the calls below
    ex = hvactor.Executor(hvactor.Executor.create_settings(timeout_s=30), num_workers=2)
    ex.start(executable_cls=Counter, executable_args=[10])
    print("CHECK run", ex.run(allreduce_rank, args=[2.0]), flush=True)
    print("CHECK remote", hvactor.get(ex.run_remote(lambda x: x * 3, args=[14])), flush=True)
    ex.execute(lambda c: c.bump())
    print("CHECK execute", ex.execute(lambda c: c.bump()), ex.execute_single(lambda c: c.n),
          flush=True)
    try:
        ex.run(lambda: {}["missing"])
    except hvactor.WorkerError as e:
        print("CHECK error", "KeyError: 'missing'" in str(e), "rank" in str(e), flush=True)
    try:
        ex.run(42)
    except ValueError as e:
        print("CHECK not-callable", e, flush=True)
    pids = ex.worker_pids()
    if "kill" in sys.argv:
        try:
            ex.run(lambda: os.kill(os.getpid(), signal.SIGKILL) if os.environ["HOROVOD_RANK"] == "1"
                   else time.sleep(30))
        except RuntimeError as e:
            print("CHECK killed", type(e).__name__, "SIGKILL" in str(e) or "died" in str(e),
                  flush=True)
    ex.shutdown()
    ex.shutdown()  # idempotent
    time.sleep(0.5)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}") and
             open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    print("CHECK left", alive, flush=True)


if __name__ == "__main__":
    main()
