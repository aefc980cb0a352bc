"""DistributedOptimizer, broadcast_parameters/broadcast_optimizer_state and
SyncBatchNorm against a single process that sees every rank's data."""

import copy
import warnings

import pytest
import torch

import hvactor.torch as hvd

STEPS = 3
BATCH = 4  # rows per rank per step


def model_and_data(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    n = hvd.size()
    x = torch.randn(STEPS, n * BATCH, 6)
    y = torch.randn(STEPS, n * BATCH, 2)
    return model, x, y


def shard(t, step):
    r = hvd.rank()
    return t[step, r * BATCH:(r + 1) * BATCH]


def reference(make_opt, loss_scale=1.0, seed=0):
    """The model after STEPS steps of one process on the whole batch."""
    model, x, y = model_and_data(seed)
    opt = make_opt(model)
    for s in range(STEPS):
        opt.zero_grad()
        (torch.nn.functional.mse_loss(model(x[s]), y[s]) * loss_scale).backward()
        opt.step()
    return model


def distributed(make_opt, seed=0, **kwargs):
    model, x, y = model_and_data(seed)
    opt = hvd.DistributedOptimizer(make_opt(model), named_parameters=model.named_parameters(),
                                   **kwargs)
    for s in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(shard(x, s)), shard(y, s)).backward()
        opt.step()
    return model, opt


def assert_same(a, b, atol=1e-5):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=atol), name


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def adam(model):
    return torch.optim.Adam(model.parameters(), lr=0.01)


@pytest.mark.parametrize("make_opt", [sgd, adam])
def test_average_matches_one_process_on_the_whole_batch(make_opt):
    model, opt = distributed(make_opt)
    assert isinstance(opt, type(make_opt(torch.nn.Linear(1, 1))))
    assert_same(model, reference(make_opt))


def test_sum_is_size_times_the_average():
    model, _ = distributed(lambda m: torch.optim.SGD(m.parameters(), lr=0.05), op=hvd.Sum)
    assert_same(model, reference(lambda m: torch.optim.SGD(m.parameters(), lr=0.05),
                                 loss_scale=hvd.size()))


def test_gradient_predivide_factor_and_groups_change_nothing_numerically():
    ref = reference(sgd)
    for kwargs in ({"gradient_predivide_factor": 2.0}, {"groups": 2}, {"num_groups": 3},
                   {"groups": None}, {"sparse_as_dense": True}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model, _ = distributed(sgd, **kwargs)
        assert_same(model, ref)


def test_explicit_groups():
    model, x, y = model_and_data()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   groups=[[params[0], params[2]], [params[1]]])
    for s in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(shard(x, s)), shard(y, s)).backward()
        opt.step()
    assert_same(model, reference(sgd))


def test_fp16_compression_is_close():
    model, _ = distributed(sgd, compression=hvd.Compression.fp16)
    assert_same(model, reference(sgd), atol=2e-3)


def adasum_pair(a, b):
    """Horovod's Adasum of two ranks' vectors, in double."""
    a, b = a.double(), b.double()
    dot, aa, bb = (a * b).sum(), (a * a).sum(), (b * b).sum()
    ca = 1.0 if aa < 1e-30 else 1.0 - dot / (2 * aa)
    cb = 1.0 if bb < 1e-30 else 1.0 - dot / (2 * bb)
    return (ca * a + cb * b).float()


def adasum_reference(n):
    """One process playing n ranks: each its own SGD with momentum from the
    shared weights; each parameter's deltas combine in Adasum's tree (pairs
    (0,1), (2,3), then pairs of pairs)."""
    model, x, y = model_and_data()
    models = [copy.deepcopy(model) for _ in range(n)]
    opts = [sgd(m) for m in models]
    for s in range(STEPS):
        starts = [p.detach().clone() for p in models[0].parameters()]
        deltas = [[] for _ in starts]
        for r, (m, opt) in enumerate(zip(models, opts)):
            rows = slice(r * BATCH, (r + 1) * BATCH)
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x[s, rows]), y[s, rows]).backward()
            opt.step()
            for i, p in enumerate(m.parameters()):
                deltas[i].append(p.detach() - starts[i])
        for i, ds in enumerate(deltas):
            while len(ds) > 1:
                ds = [adasum_pair(ds[k], ds[k + 1]) for k in range(0, len(ds), 2)]
            with torch.no_grad():
                for m in models:
                    list(m.parameters())[i].copy_(starts[i] + ds[0])
    return models[0]


def test_adasum_optimizer_matches_one_process_playing_the_ranks():
    n = hvd.size()
    if n & (n - 1):
        with pytest.raises(NotImplementedError, match="non-power of 2 ranks"):
            distributed(sgd, op=hvd.Adasum)
        return
    model, opt = distributed(sgd, op=hvd.Adasum)
    assert isinstance(opt, torch.optim.SGD)
    assert_same(model, adasum_reference(n))
    # Not the average's result: Adasum combined the deltas.
    average = reference(sgd)
    assert any(not torch.allclose(p, q, atol=1e-4)
               for p, q in zip(model.parameters(), average.parameters()))
    with pytest.raises(AssertionError, match="Skipping synchronization is not supported"):
        with opt.skip_synchronize():
            pass


def test_backward_passes_per_step_accumulates_locally():
    model, x, y = model_and_data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    half = BATCH // 2
    r = hvd.rank()
    for s in range(STEPS):
        opt.zero_grad()
        for k in range(2):
            rows = slice(r * BATCH + k * half, r * BATCH + (k + 1) * half)
            (torch.nn.functional.mse_loss(model(x[s, rows]), y[s, rows]) / 2).backward()
        opt.step()
    assert_same(model, reference(lambda m: torch.optim.SGD(m.parameters(), lr=0.1)))


def test_too_many_backward_passes_and_zero_grad_between_are_errors():
    if hvd.size() == 1:
        pytest.skip("needs 2 ranks (no hooks with one)")
    model, x, y = model_and_data()
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters())
    loss = lambda: torch.nn.functional.mse_loss(model(shard(x, 0)), shard(y, 0))  # noqa: E731
    loss().backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        loss().backward()
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()


def test_unused_parameter_does_not_stall():
    model, x, y = model_and_data()
    extra = torch.nn.Parameter(torch.ones(3))
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(list(model.parameters()) + [extra], lr=0.1),
        named_parameters=list(model.named_parameters()) + [("extra", extra)])
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(shard(x, 0)), shard(y, 0))
    if hvd.rank() == 0:
        loss = loss + extra.sum()  # only rank 0 uses it
    loss.backward()
    opt.step()
    # Rank 0's gradient of ones, averaged with the others' zeros.
    expect = torch.ones(3) - 0.1 / hvd.size()
    assert torch.allclose(extra.detach(), expect)


def test_bad_options():
    model, _, _ = model_and_data()
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(model), op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(sgd(model), named_parameters=[("a", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(sgd(model), named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(ValueError, match="tuples"):
        hvd.DistributedOptimizer(sgd(model), named_parameters=list(model.parameters()))


def test_broadcast_parameters_and_optimizer_state():
    torch.manual_seed(hvd.rank())  # every rank different
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * (hvd.rank() + 1))
    if hvd.rank() == 0:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.001
    state = [opt.state[p] for p in model.parameters()]
    gathered = hvd.allgather_object([{k: v.tolist() if torch.is_tensor(v) else v
                                      for k, v in s.items()} for s in state])
    assert all(g == gathered[0] for g in gathered)
    weights = hvd.allgather_object([p.tolist() for p in model.parameters()])
    assert all(w == weights[0] for w in weights)
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), 0)


def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch():
    torch.manual_seed(1)
    n, r = hvd.size(), hvd.rank()
    x = torch.randn(n * 3, 4, 5, dtype=torch.float64)
    bn = torch.nn.BatchNorm1d(4).double()
    sbn = hvd.SyncBatchNorm(4).double()
    sbn.load_state_dict(bn.state_dict())
    full = x.clone().requires_grad_()
    mine = x[r * 3:(r + 1) * 3].clone().requires_grad_()
    out_full = bn(full)
    out = sbn(mine)
    assert torch.allclose(out, out_full[r * 3:(r + 1) * 3])
    assert torch.allclose(sbn.running_mean, bn.running_mean)
    assert torch.allclose(sbn.running_var, bn.running_var)
    w = torch.arange(out_full.numel(), dtype=torch.float64).reshape(out_full.shape)
    (out_full * w).sum().backward()
    (out * w[r * 3:(r + 1) * 3]).sum().backward()
    assert torch.allclose(mine.grad, full.grad[r * 3:(r + 1) * 3])
    sbn.eval()
    assert torch.allclose(sbn(mine.detach()), bn.eval()(mine.detach()))
