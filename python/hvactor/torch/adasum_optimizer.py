"""horovod.torch's Adasum optimizer (DistributedOptimizer with op=hvd.Adasum
on more than one rank) for hvactor.

As soon as backward() produced a parameter's gradient, the rank steps the
wrapped optimizer on that parameter alone (its own momentum, its own Adam
moments) and starts an Adasum allreduce of the parameter's change; step()
waits for them and sets every parameter to its value before the local step
plus the combined change.
"""

from contextlib import contextmanager

import torch

from hvactor.torch.mpi_ops import Adasum, allreduce_async_, synchronize


class _DistributedAdasumOptimizer:
    """The methods mixed into the wrapped optimizer's class for op=Adasum,
    over _DistributedOptimizer's (its _hv_params, _hv_names, zero_grad and
    set_backward_passes_per_step serve both)."""

    def _hv_setup_adasum(self, named_parameters, compression, backward_passes_per_step):
        self._compression = compression
        self._names = self._hv_names(named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._delay = {p: backward_passes_per_step for p in self._names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starts = {p: torch.zeros_like(p, requires_grad=False) for p in self._names}
        for p in self._hv_params():
            if p.requires_grad:
                # A parameter this rank never reaches still steps (zeros), as
                # in Horovod, so every rank submits every delta.
                p.grad = torch.zeros_like(p)
                self._requires_update.add(p)
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._hv_make_adasum_hook(p))
                self._grad_accs.append(acc)

    def _hv_step_only(self, p):
        """The wrapped optimizer's step() on `p` alone."""
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is q for q in group["params"]) else []
        try:
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _hv_delta_async(self, p):
        start = self._starts[p]
        with torch.no_grad():
            start.copy_(p)
        self._hv_step_only(p)
        with torch.no_grad():
            p.sub_(start)  # p holds this rank's delta until step()
        compressed, ctx = self._compression.compress(p.data)
        return allreduce_async_(compressed, name=self._names.get(p), op=Adasum), ctx

    def _hv_make_adasum_hook(self, p):
        def hook(*_):
            if p in self._handles and self._handles[p][0] is not None and self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._delay[p] -= 1
            handle = (None, None)
            if self._delay[p] == 0:
                handle = self._hv_delta_async(p)
            self._handles[p] = handle
        return hook

    def synchronize(self):
        """Nothing to do: step() combines the deltas (Horovod's)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        # Every delta is submitted before any is waited for: a rank waiting
        # on one the others have not submitted yet would wait for ever.
        for p in self._requires_update:
            if self._handles.get(p, (None, None))[0] is None:
                self._handles[p] = self._hv_delta_async(p)
        for p, (handle, ctx) in self._handles.items():
            delta = self._compression.decompress(synchronize(handle), ctx)
            with torch.no_grad():
                self._starts[p].add_(delta)
                p.copy_(self._starts[p])
            self._delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss
