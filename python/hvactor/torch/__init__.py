"""hvactor.torch: horovod.torch's API on hvactor.

    import hvactor.torch as hvd      # was: import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    model = ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Run it with `hvactor-run -np 4 python3 train.py`.
"""

import torch  # noqa: F401 (loads LibTorch before the extension)

from hvactor.torch import elastic  # noqa: F401
from hvactor.torch.compression import Compression  # noqa: F401
from hvactor.torch.functions import (allgather_object, broadcast_object,  # noqa: F401
                                     broadcast_optimizer_state, broadcast_parameters)
from hvactor.torch.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum, add_process_set,
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
    alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built,
    gloo_enabled, grouped_allgather, grouped_allgather_async, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, init, is_homogeneous, is_initialized,
    join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll,
    rank, reducescatter, reducescatter_async, remove_process_set, rocm_built, shutdown, size,
    sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from hvactor.torch.optimizer import DistributedOptimizer  # noqa: F401
from hvactor.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
