"""horovod.torch.elastic for hvactor: state that survives a change of the
job's workers, and the loop that resets the collectives when one dies or
hosts come and go.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                ...
                state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    train(state)

Run under `hvactor-run -np 4 --min-np 2 --max-np 4 python3 train.py`. The
loop is hvactor's (hvactor/elastic.hpp): before each attempt state.sync()
makes every rank's state rank 0's; a HorovodInternalError (a peer died)
restores the last commit and resets; a HostsUpdatedInterrupt (raised by
commit() on every rank at the same step) resets without restoring.
"""

import copy
import functools
import math
import weakref

import torch

from hvactor import _hvactor as _lib
from hvactor.torch import mpi_ops
from hvactor.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters)

HorovodInternalError = _lib.HorovodInternalError
HostsUpdatedInterrupt = _lib.HostsUpdatedInterrupt


def _after_reset():
    mpi_ops.global_process_set.ranks = list(range(_lib.size()))
    mpi_ops._handles.clear()


class State(_lib.ElasticState):
    """Base of elastic state (horovod.common.elastic.State): subclasses
    implement save(), restore() and sync()."""

    def __init__(self):
        super().__init__()
        self._reset_callbacks = []
        me = weakref.ref(self)  # the C++ state must not keep its Python self alive
        super().register_reset_callback(lambda: me() and me()._on_reset())

    def _on_reset(self):
        _after_reset()
        self.reset()
        for fn in self._reset_callbacks:
            fn()

    def register_reset_callbacks(self, callbacks):
        """Functions to call after every reset (the world may have changed
        size: rescale the learning rate there)."""
        self._reset_callbacks.extend(callbacks)

    def reset(self):
        """Called after every reset, before the user's callbacks."""

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """State made of picklable attributes (horovod's ObjectState):
    ObjectState(epoch=0, batch=0) gives state.epoch and state.batch."""

    def __init__(self, bcast_object=broadcast_object, get_rank=None, **kwargs):
        self._bcast_object = bcast_object
        self._saved = dict(kwargs)
        self.__dict__.update(kwargs)
        super().__init__()

    def _values(self):
        return {k: getattr(self, k) for k in self._saved}

    def save(self):
        self._saved = copy.deepcopy(self._values())

    def _restore_values(self):
        self.__dict__.update(copy.deepcopy(self._saved))

    def restore(self):
        self._restore_values()

    def sync(self):
        if self._saved:
            self._saved = self._bcast_object(self._values(), 0, name="elastic.state")
            self._restore_values()  # only the values (a subclass restores more)


class _ModelHandler:
    def __init__(self, model):
        self.value = model
        self.saved = copy.deepcopy(model.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_ModelHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_ModelHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), 0,
                                                    name="elastic.sampler"))


def _handler_of(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(ObjectState):
    """A model, an optimizer, ElasticSamplers and picklable values
    (horovod.torch.elastic.TorchState): TorchState(model, optimizer,
    train_sampler=sampler, epoch=0, batch=0)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handled = {"model": model, "optimizer": optimizer}
        handled.update({k: v for k, v in kwargs.items() if _handler_of(v) is not None})
        self._handlers = {k: _handler_of(v) for k, v in handled.items() if v is not None}
        values = {k: v for k, v in kwargs.items() if k not in self._handlers}
        super().__init__(**values)
        for k, h in self._handlers.items():
            object.__setattr__(self, k, h.value)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def reset(self):
        for h in self._handlers.values():
            if isinstance(h, _SamplerHandler):
                h.value.reset()


def run(func):
    """Decorates `func(state, ...)` with the elastic loop: it runs again
    from the last commit after a worker fails, and from the current state
    after hosts were added or removed."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise ValueError("hvd.elastic.run: the first argument must be a "
                             "hvd.elastic.State (TorchState, ObjectState)")
        result = []
        _lib.elastic_run_loop(state, lambda: result.append(func(state, *args, **kwargs)))
        _after_reset()
        return result[-1]
    return wrapper


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset across the ranks and again, over what this
    epoch has not processed yet, after every reset (horovod.torch.elastic.
    ElasticSampler). Call record_batch() after each batch and set_epoch()
    at the end of each epoch; keep it in the TorchState."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts a batch of `batch_size` samples on every rank as done."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = mpi_ops.size() if _lib.is_initialized() else 1
        self.rank = mpi_ops.rank() if _lib.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def get_indices(self):
        indices = list(self.remaining_indices)
        indices += indices[:self.total_size - len(indices)]  # evenly divisible
        return indices[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self.indices = self.get_indices()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
