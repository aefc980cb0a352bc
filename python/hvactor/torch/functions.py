"""horovod.torch.functions for hvactor: parameters, optimizer state and
Python objects across ranks."""

import collections
import pickle

import torch

from hvactor.torch.mpi_ops import (allgather, broadcast_, broadcast_async_, global_process_set,
                                   rank, synchronize)

try:  # functions and lambdas, as Horovod pickles them; plain pickle otherwise
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover (Debian 12 has no python3-cloudpickle by default)
    _pickle = pickle


def broadcast_parameters(params, root_rank):
    """Overwrites every tensor of `params` with root's: model.state_dict(),
    model.named_parameters() or model.parameters() (a dict is taken in
    sorted key order, so every rank pairs the same tensors)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = [broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p, root_rank,
                                name) for name, p in items]
    for h in handles:
        synchronize(h)


def _object_bytes(obj):
    return torch.frombuffer(bytearray(_pickle.dumps(obj)), dtype=torch.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Root's `obj` on every rank (pickled, then broadcast as bytes)."""
    name = name or type(obj).__name__
    is_root = rank() == root_rank  # a rank of the job, as Horovod's
    data = _object_bytes(obj) if is_root else None
    length = torch.tensor([data.numel() if is_root else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name + ".sz", process_set)
    if not is_root:
        data = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name + ".t", process_set)
    return obj if is_root else pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    data = _object_bytes(obj)
    lengths = allgather(torch.tensor([data.numel()], dtype=torch.int64), name=name + ".sz",
                        process_set=process_set).tolist()
    gathered = allgather(data, name=name + ".t", process_set=process_set).numpy().tobytes()
    out, start = [], 0
    for n in lengths:
        out.append(pickle.loads(gathered[start:start + n]))
        start += n
    return out


def _create_state(optimizer):
    """A rank whose optimizer has no state yet steps once on zero
    gradients, so every rank holds the same entries (Horovod's rule)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    step = getattr(optimizer, "_inner_step", optimizer.step)  # DistributedOptimizer: no allreduce
    step()


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Gives every rank root's optimizer state: each parameter's state
    tensors (momentum, Adam's moments, ...) and every group's options
    (lr, momentum, betas, ...)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _create_state(optimizer)
    state = optimizer.state_dict()
    if not state["state"]:
        return
    tensors, scalars, setters = [], {}, {}
    seen = collections.Counter()
    for index, group in enumerate(state["param_groups"]):
        for key, value in group.items():
            if key != "params":
                scalars[f"{key}.{index}"] = value
                setters[f"{key}.{index}"] = (group, key)
        for pid in group["params"]:
            for key, value in state["state"].get(pid, {}).items():
                seen[key] += 1
                tag = f"{key}.{seen[key]}"
                if torch.is_tensor(value):
                    tensors.append((tag, value))
                else:
                    scalars[tag] = value
                    setters[tag] = (state["state"][pid], key)
    broadcast_parameters(tensors, root_rank)
    for tag, value in broadcast_object(scalars, root_rank, "optimizer.scalars").items():
        target, key = setters[tag]
        target[key] = value
    optimizer.load_state_dict(state)
