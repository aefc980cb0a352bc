"""horovod.torch.DistributedOptimizer for hvactor.

The returned optimizer is an instance of a subclass of the wrapped
optimizer's class (isinstance(opt, torch.optim.SGD) stays true, its
param_groups and state are the usual ones). Each gradient starts its
allreduce from a hook on the parameter's gradient accumulator as soon as
backward() produced it, named after the parameter, so ranks pair gradients
by name whatever order they become ready in; step() waits for them.
"""

import warnings
from contextlib import contextmanager

import torch

from hvactor.torch.adasum_optimizer import _DistributedAdasumOptimizer
from hvactor.torch.compression import Compression
from hvactor.torch.functions import broadcast_object
from hvactor.torch.mpi_ops import (Adasum, Average, Sum, allreduce_async_, global_process_set,
                                   grouped_allreduce_async_, size, sparse_allreduce_async,
                                   synchronize)


def _split(items, n):
    """`items` in order, in n groups of nearly equal counts."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


class _DistributedOptimizer:
    """The methods mixed into the wrapped optimizer's class."""

    def _hv_setup(self, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        self._names = self._hv_names(named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._delay = {p: backward_passes_per_step for p in self._names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        if process_set.included() and size() > 1:
            self._hv_register_hooks()

    def _hv_params(self):
        return [p for group in self.param_groups for p in group["params"]]

    def _hv_names(self, named_parameters):
        if named_parameters is None:
            return {p: f"allreduce.noname.{i}.{j}"
                    for i, group in enumerate(self.param_groups)
                    for j, p in enumerate(group["params"])}
        named = list(named_parameters)
        if any(not isinstance(x, tuple) for x in named):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        names = [k for k, _ in named]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             f"Found duplicates: {', '.join(dups)}")
        by_id = {id(v): k for k, v in named}
        unnamed = [id(p) for p in self._hv_params() if id(p) not in by_id]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             f"were not named. Python object ids: {', '.join(map(str, unnamed))}")
        return {p: by_id[id(p)] for p in self._hv_params()}

    def _hv_group_parameters(self):
        params = [p for p in self._hv_params() if p.requires_grad]
        order = broadcast_object([self._names[p] for p in params], root_rank=0,
                                 name="optimizer.groups", process_set=self.process_set)
        params.sort(key=lambda p: order.index(self._names[p]))
        if isinstance(self._groups, list):
            ids = {id(p) for p in params}
            grouped = [[p for p in g if id(p) in ids] for g in self._groups]
            taken = {id(p) for g in grouped for p in g}
            grouped += [[p] for p in params if id(p) not in taken]
        else:
            grouped = _split(params, self._groups)
        for g in grouped:
            g = tuple(g)
            for p in g:
                self._p_to_group[p] = g
            self._group_counts[g] = 0

    def _hv_register_hooks(self):
        if self._groups is not None:
            self._hv_group_parameters()
        for p in self._hv_params():
            if p.requires_grad:
                self._requires_update.add(p)
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._hv_make_hook(p))
                self._grad_accs.append(acc)

    def _hv_allreduce_grad_async(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        name = self._names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self.op,
                                              process_set=self.process_set), None
            tensor = tensor.to_dense()
            p.grad = tensor
        compressed, ctx = self._compression.compress(tensor)
        pre, post = 1.0, 1.0
        if self.op == Average:
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                postscale_factor=post, process_set=self.process_set), ctx

    def _hv_grouped_allreduce_async(self, group):
        for p in group:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        compressed = [self._compression.compress(p.grad) for p in group]
        handle = grouped_allreduce_async_([c for c, _ in compressed], name=self._names[group[0]],
                                          op=self.op, process_set=self.process_set)
        return handle, [ctx for _, ctx in compressed]

    def _hv_make_hook(self, p):
        def hook(*_):
            if p in self._handles and self._handles[p][0] is not None and self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._delay[p] -= 1
            handle, ctx = None, None
            if self._delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._hv_grouped_allreduce_async(group)
                        for q in group:
                            self._handles.pop(q, None)
                        self._group_counts[group] = 0
                    return
                handle, ctx = self._hv_allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _hv_start_missing(self):
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update - done:  # unused by this step: zeros
            self._handles[p] = self._hv_allreduce_grad_async(p)
        for key, (handle, _) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._hv_allreduce_grad_async(key)

    def synchronize(self):
        """Finishes every gradient's allreduce and writes the results into
        the gradients (step() calls it)."""
        if not self.process_set.included():
            self._synchronized = True
            return
        self._hv_start_missing()
        for key, (handle, ctx) in self._handles.items():
            output = synchronize(handle)
            if isinstance(key, tuple):
                for p, out, c in zip(key, output, ctx):
                    self._delay[p] = self.backward_passes_per_step
                    p.grad.set_(self._compression.decompress(out, c))
                self._group_counts[key] = 0
                continue
            self._delay[key] = self.backward_passes_per_step
            if key.grad.is_sparse:
                key.grad.zero_().add_(output)
            else:
                key.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize: call synchronize() first,
        change the reduced gradients (clip them), then step()."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def _inner_step(self, closure=None):
        return super(self.__class__, self).step(closure)

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return self._inner_step(closure)

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(set_to_none)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate before a reduction."""
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        super(self.__class__, self).load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that step() applies the gradients averaged (or
    summed, op=Sum) over the ranks (horovod.torch.DistributedOptimizer).
    op=Adasum on more than one rank is Horovod's Adasum optimizer: each rank
    steps `optimizer` on its own gradients and the ranks combine the
    parameters' changes with Adasum (adasum_optimizer.py)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op not in (Average, Sum, Adasum):
        raise ValueError("op must be hvd.Average, hvd.Sum or hvd.Adasum")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be at least 1")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for g in groups:
            for p in g:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
    mixins = [_DistributedOptimizer]
    adasum = op == Adasum and size() > 1
    if adasum:  # Horovod's _DistributedAdasumOptimizer, with its limits
        if process_set is not global_process_set:
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        if size() & (size() - 1):
            raise NotImplementedError("Running Adasum with non-power of 2 ranks is not "
                                      "supported yet.")
        mixins.append(_DistributedAdasumOptimizer)
    methods = {}
    for mixin in mixins:
        methods.update({k: v for k, v in mixin.__dict__.items()
                        if not k.startswith("__") or k == "__doc__"})
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls.__new__(cls)
    optimizer.__class__.__init__(opt, optimizer.param_groups)
    if adasum:
        opt._hv_setup_adasum(named_parameters, compression, backward_passes_per_step)
    else:
        opt._hv_setup(named_parameters, compression, backward_passes_per_step, op,
                      gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return opt
