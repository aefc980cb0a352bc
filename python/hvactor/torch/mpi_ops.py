"""horovod.torch.mpi_ops for hvactor: the collectives on torch tensors.

Every call has horovod.torch's signature, defaults and semantics; the work
is hvactor's LibTorch adapter (hvactor/torch.hpp) through the extension
module hvactor._hvactor. Async calls return an integer handle for poll()
and synchronize(), as Horovod's do.
"""

import atexit
import itertools
import threading

import torch

from hvactor import _hvactor as _lib
from hvactor.torch.compression import Compression

HorovodInternalError = _lib.HorovodInternalError

# Horovod's ReduceOp values.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_OPS = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
        Product: "Product"}


# --- basics -------------------------------------------------------------------

class ProcessSet:
    """A subset of the job's ranks that collectives can run on
    (horovod.torch.ProcessSet): pass it to init(process_sets=[...]) or
    add_process_set(), then as process_set= to any collective."""

    def __init__(self, ranks):
        if not isinstance(ranks, (list, tuple, range)):
            raise ValueError("ProcessSet takes a list of ranks (an mpi4py communicator "
                             "is not supported by hvactor)")
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _invalidate(self):
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError(f"{self} has not been registered: pass it to "
                             "hvd.init(process_sets=[...]) or hvd.add_process_set()")
        return self.process_set_id

    def size(self):
        """How many ranks the set holds (None before it is registered)."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _lib.size()
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (None before registration;
        -1 outside the set)."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _lib.rank()
        return _lib.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process belongs to the set (None before registration)."""
        if self.process_set_id is None:
            return None
        return _lib.rank() in self.ranks if self.process_set_id else True

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks and \
            self.process_set_id == other.process_set_id

    def __hash__(self):
        return hash((tuple(self.ranks), self.process_set_id))

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_sets = {0: global_process_set}


def init(comm=None, process_sets=None):
    """Joins the job's collectives (horovod.torch.init). Under hvactor-run
    every rank joins the job it started; run directly, the process is a job
    of one rank. `process_sets`: ProcessSet objects created here (every
    rank passes the same in the same order), or "dynamic" to allow
    add_process_set() later (as HOROVOD_DYNAMIC_PROCESS_SETS=1)."""
    if comm is not None:
        raise ValueError("hvactor.torch.init: comm= (an MPI communicator) is not supported; "
                         "hvactor-run starts the ranks, use process_sets= for subsets")
    dynamic = process_sets == "dynamic"
    sets = [] if process_sets is None or dynamic else list(process_sets)
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets must be ProcessSet objects or 'dynamic'")
    ids = _lib.init([ps.ranks for ps in sets], dynamic)
    for ps, i in zip(sets, ids):
        ps.process_set_id = i
        _sets[i] = ps
    global_process_set.ranks = list(range(_lib.size()))


def shutdown():
    """Leaves the collectives (horovod.torch.shutdown); init() may follow."""
    _lib.shutdown()
    for i, ps in list(_sets.items()):
        if i != 0:
            ps._invalidate()
            del _sets[i]
    _handles.clear()


def is_initialized():
    return _lib.is_initialized()


@atexit.register
def _shutdown_at_exit():
    # Horovod shuts down at exit too: the collectives' threads end before
    # the interpreter (and the extension's statics) go away.
    if _lib.is_initialized():
        _lib.shutdown()


def _not_initialized():
    return ValueError("Horovod has not been initialized; use hvd.init().")


def _checked(f):
    def call():
        if not _lib.is_initialized():
            raise _not_initialized()
        return f()
    call.__name__ = f.__name__
    call.__doc__ = f"This process's {f.__name__.replace('_', ' ')} (horovod.torch.{f.__name__})."
    return call


rank = _checked(_lib.rank)
size = _checked(_lib.size)
local_rank = _checked(_lib.local_rank)
local_size = _checked(_lib.local_size)
cross_rank = _checked(_lib.cross_rank)
cross_size = _checked(_lib.cross_size)


def is_homogeneous():
    """Whether every node runs the same number of ranks."""
    return local_size() * cross_size() == size()


def start_timeline(file_path, mark_cycles=False):
    """Writes a Chrome trace of every collective to file_path from now on."""
    _lib.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _lib.stop_timeline()


def mpi_threads_supported():
    return False


def mpi_built():
    return False


def mpi_enabled():
    return False


def gloo_built():
    return True


def gloo_enabled():
    return True


def nccl_built():
    return _lib.cuda_built()


def cuda_built():
    return _lib.cuda_built()


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def add_process_set(process_set):
    """Registers a set of ranks (a ProcessSet or a list of ranks) once
    every rank called this with the same ranks; needs
    init(process_sets="dynamic") or HOROVOD_DYNAMIC_PROCESS_SETS=1."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} has already been registered")
    ps.process_set_id = _lib.add_process_set(ps.ranks)
    _sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a registered set (every rank calls it); False for the global
    set or a set that is not registered."""
    i = process_set.process_set_id
    if not i:
        return False
    removed = _lib.remove_process_set(i)
    process_set._invalidate()
    _sets.pop(i, None)
    return removed


def _set_id(process_set):
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a ProcessSet (hvd.global_process_set, "
                         "or one from hvd.add_process_set)")
    return process_set._id()


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for the deprecated average= argument."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        return Average if average else Sum
    return Average


# --- handles ------------------------------------------------------------------

_handles = {}
_next_handle = itertools.count(1)
_handles_lock = threading.Lock()


def _register(finish):
    """A handle for `finish`, a callable that waits and returns the result."""
    with _handles_lock:
        h = next(_next_handle)
        _handles[h] = finish
    return h


class _Pending:
    def __init__(self, wait, ready):
        self.wait = wait
        self.ready = ready


def poll(handle):
    """True once the operation of `handle` finished; synchronize() then
    returns without blocking."""
    pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"handle {handle} was not returned by an async call, or was synchronized")
    return pending.ready()


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result (the
    output tensor; a list for grouped calls; (output, received_splits) for
    alltoall with splits). Raises HorovodInternalError when it failed."""
    with _handles_lock:
        pending = _handles.pop(handle, None)
    if pending is None:
        return None
    return pending.wait()


def _check_op(op, process_set):
    if op not in _OPS:
        raise ValueError(f"unknown op {op!r}: use hvd.Average, Sum, Adasum, Min, Max or Product")
    if op == Adasum:  # Horovod's exceptions for what its Adasum does not do
        if process_set.process_set_id:
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        n = _lib.size()
        if n & (n - 1):
            raise NotImplementedError("Running Adasum with non-power of 2 ranks is not "
                                      "supported yet.")


def _in_place(tensor, output, op, name, prescale_factor, postscale_factor, process_set):
    _check_op(op, process_set)
    if output is not tensor:
        output.copy_(tensor)
    h = _lib.allreduce_async_(output, op, name or "", float(prescale_factor),
                              float(postscale_factor), _set_id(process_set))

    def wait():
        _lib.synchronize_in_place(h)
        return output
    return _Pending(wait, h.ready)


def _with_result(h, then):
    def wait():
        out, splits = _lib.synchronize_result(h)
        return then(out, splits)
    return _Pending(wait, h.ready)


def _group(pendings):
    def wait():
        results, error = [], None
        for p in pendings:  # wait for every member, then raise the first error
            try:
                results.append(p.wait())
            except Exception as e:  # noqa: BLE001 (re-raised below)
                error = error or e
        if error is not None:
            raise error
        return results
    return _Pending(wait, lambda: all(p.ready() for p in pendings))


def _member_name(name, i):
    return f"{name}.{i}" if name else None


# --- allreduce ----------------------------------------------------------------

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` across the ranks into a new tensor (the
    input is not modified); returns a handle for synchronize()."""
    op = handle_average_backwards_compatibility(op, average)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _register(_in_place(tensor, output, op, name, prescale_factor, postscale_factor,
                               process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` in place; returns a handle for synchronize()."""
    op = handle_average_backwards_compatibility(op, average)
    return _register(_in_place(tensor, tensor, op, name, prescale_factor, postscale_factor,
                               process_set))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place across the ranks and returns it. Unnamed,
    it pairs with the other ranks' calls in call order (as any blocking call
    must) and takes hvactor's synchronous path; named, it travels under its
    name (the timeline, the stall warnings) as an async call does."""
    if name:
        return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                            postscale_factor, process_set))
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    _check_op(op, process_set)
    _lib.allreduce_(tensor, op, float(prescale_factor), float(postscale_factor),
                    _set_id(process_set))
    return tensor


class HorovodAllreduce(torch.autograd.Function):
    """allreduce as an autograd function: the gradient is the allreduce of
    the output's gradient with the same op and factors."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        output = tensor.clone(memory_format=torch.contiguous_format)
        return allreduce_(output, average, name, op, prescale_factor, postscale_factor,
                          process_set)

    @staticmethod
    def backward(ctx, grad_output):
        average, op, pre, post, ps = ctx.args
        grad = allreduce(grad_output, average=average, op=op, prescale_factor=pre,
                         postscale_factor=post, process_set=ps)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` across the ranks as a new tensor
    (differentiable); `compression` says how it travels."""
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor,
                                     postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async of every tensor, reduced together; synchronize()
    returns the list of outputs."""
    op = handle_average_backwards_compatibility(op, average)
    return _register(_group([
        _in_place(t, torch.empty_like(t, memory_format=torch.contiguous_format), op,
                  _member_name(name, i), prescale_factor, postscale_factor, process_set)
        for i, t in enumerate(tensors)]))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async_ of every tensor, reduced together in place."""
    op = handle_average_backwards_compatibility(op, average)
    return _register(_group([
        _in_place(t, t, op, _member_name(name, i), prescale_factor, postscale_factor, process_set)
        for i, t in enumerate(tensors)]))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces every tensor in place as one group; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), average, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        average, op, pre, post, ps = ctx.args
        grads = grouped_allreduce(list(grad_outputs), average=average, op=op,
                                  prescale_factor=pre, postscale_factor=post, process_set=ps)
        return (None,) * 6 + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reductions of every tensor, as new tensors (differentiable)."""
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                            process_set, *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by gathering every rank's indices and
    values (Horovod's sparse path); synchronize() returns a sparse tensor,
    averaged for op=Average."""
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async supports op=Average and op=Sum")
    t = tensor.coalesce()
    values = _with_result(_lib.allgather_async(t._values(), f"{name}.values" if name else "",
                                               _set_id(process_set)), lambda out, _: out)
    indices = _with_result(_lib.allgather_async(t._indices().t().contiguous(),
                                                f"{name}.indices" if name else "",
                                                _set_id(process_set)), lambda out, _: out)
    group = _group([values, indices])

    def wait():
        v, i = group.wait()
        if op == Average:
            v = v / process_set.size()
        return torch.sparse_coo_tensor(i.t(), v, t.shape).coalesce()
    return _register(_Pending(wait, group.ready))


# --- allgather ----------------------------------------------------------------

def _allgather(tensor, name, process_set):
    h = _lib.allgather_async(tensor, name or "", _set_id(process_set))
    return _with_result(h, lambda out, _: out)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (the
    first dimension may differ between ranks)."""
    return _register(_allgather(tensor, name, process_set))


class HorovodAllgather(torch.autograd.Function):
    """allgather as an autograd function: a rank's input gets its rows of
    the average of the output's gradients."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad = allreduce(grad_output, op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ps)
        offset = int(dims[:ps.rank()].sum()) if ps.rank() else 0
        return grad.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along dimension 0, in rank order
    (differentiable)."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _register(_group([_allgather(t, _member_name(name, i), process_set)
                             for i, t in enumerate(tensors)]))


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        ps = ctx.process_set
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64), process_set=ps)
        offsets = dims[:ps.rank()].sum(dim=0) if ps.rank() else torch.zeros(len(ctx.dims))
        return (None, None) + tuple(g.narrow(0, int(o), d)
                                    for g, o, d in zip(grads, offsets, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of every tensor, negotiated together (differentiable)."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# --- broadcast ----------------------------------------------------------------

def _check_root(root_rank, process_set):
    """root_rank is a rank of the job (Horovod's), one of the set's."""
    ranks = process_set.ranks if process_set.process_set_id else range(size())
    if not isinstance(root_rank, int) or root_rank not in ranks:
        raise ValueError(f"root_rank {root_rank!r} is not a rank of {process_set}")


def _broadcast(tensor, output, root_rank, name, process_set):
    _check_root(root_rank, process_set)
    h = _lib.broadcast_async(tensor, root_rank, name or "", _set_id(process_set))

    def then(out, _):
        return output.copy_(out) if output is not None else out
    return _with_result(h, then)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending root's `tensor` to every rank, as a new tensor."""
    return _register(_broadcast(tensor, None, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root's, in place."""
    return _register(_broadcast(tensor, tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root's and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class HorovodBroadcast(torch.autograd.Function):
    """broadcast as an autograd function: root gets the average of the
    output's gradients, the other ranks zeros."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's `tensor` on every rank, as a new tensor (differentiable)."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


# --- alltoall -----------------------------------------------------------------

def _splits_list(splits):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        splits = splits.tolist()
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[i] rows of `tensor` to rank i (equal parts
    without splits); synchronize() returns (output, received_splits)."""
    h = _lib.alltoall_async(tensor, _splits_list(splits), name or "", _set_id(process_set))
    return _register(_with_result(
        h, lambda out, received: (out, torch.tensor(received, dtype=torch.int32))))


class HorovodAlltoall(torch.autograd.Function):
    """alltoall as an autograd function: gradients travel back the way the
    rows came."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received,
                                             process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent here, in rank order (differentiable); with
    `splits` also how many came from each rank: (output, received_splits)."""
    output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


# --- reducescatter ------------------------------------------------------------

def _reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor):
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports op=Average and op=Sum")
    h = _lib.reducescatter_async(tensor, op, name or "", float(prescale_factor),
                                 float(postscale_factor), _set_id(process_set))
    return _with_result(h, lambda out, _: out)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` and scattering its rows: rank r gets its
    share of dimension 0 (the first n % size ranks one row more)."""
    return _register(_reducescatter(tensor, name, op, process_set, prescale_factor,
                                    postscale_factor))


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter as an autograd function: the gradient is the allgather
    of the output's gradients, scaled as the forward pass was."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor * postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, ps, scale = ctx.args
        grad = allgather(grad_output, process_set=ps) * scale
        if op == Average:
            grad = grad / ps.size()
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's rows of the reduction of `tensor` (differentiable)."""
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _register(_group([
        _reducescatter(t, _member_name(name, i), op, process_set, prescale_factor,
                       postscale_factor) for i, t in enumerate(tensors)]))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of every tensor, negotiated together."""
    return [reducescatter(t, _member_name(name, i), compression, op, process_set,
                          prescale_factor, postscale_factor) for i, t in enumerate(tensors)]


# --- join and barrier ---------------------------------------------------------

def join(device=-1):
    """This rank ran out of data: it takes part in the other ranks'
    allreduces with zeros until every rank joined. Returns the rank that
    joined last."""
    return _lib.join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set called barrier()."""
    _lib.barrier(_set_id(process_set))
