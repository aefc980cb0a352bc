"""The collectives on tensors with Horovod's expected values: every op,
dtype and scale factor, the async and grouped forms, autograd, and the
errors Horovod raises."""

import pytest
import torch

import hvactor.torch as hvd

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.uint8]


def rank_tensor(dtype, shape=(5, 3), add=0):
    return torch.full(shape, hvd.rank() + 1 + add).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sum_and_average(dtype):
    n = hvd.size()
    total = n * (n + 1) // 2
    summed = hvd.allreduce(rank_tensor(dtype), op=hvd.Sum)
    assert summed.dtype == dtype and summed.shape == (5, 3)
    assert torch.equal(summed, torch.full((5, 3), total).to(dtype))
    if dtype.is_floating_point:
        avg = hvd.allreduce(rank_tensor(dtype))
        assert torch.allclose(avg.double(), torch.full((5, 3), total / n, dtype=torch.float64))


@pytest.mark.parametrize("op,expect", [(hvd.Min, lambda n: 1), (hvd.Max, lambda n: n),
                                       (hvd.Product, lambda n: float(torch.arange(1, n + 1).prod()))])
def test_allreduce_min_max_product(op, expect):
    out = hvd.allreduce(rank_tensor(torch.float64), op=op)
    assert torch.equal(out, torch.full((5, 3), float(expect(hvd.size())), dtype=torch.float64))


def test_allreduce_scale_factors():
    n = hvd.size()
    out = hvd.allreduce(torch.ones(7), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.allclose(out, torch.full((7,), float(n)))
    out = hvd.allreduce(torch.ones(7), op=hvd.Average, prescale_factor=3.0)
    assert torch.allclose(out, torch.full((7,), 3.0))


def test_allreduce_deprecated_average_argument():
    n = hvd.size()
    assert hvd.allreduce(torch.ones(2), average=False).tolist() == [float(n)] * 2
    assert hvd.allreduce(torch.ones(2), average=True).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)


def test_allreduce_in_place_and_input_untouched():
    n = hvd.size()
    t = torch.ones(4)
    out = hvd.allreduce(t, op=hvd.Sum)
    assert t.tolist() == [1.0] * 4 and out.tolist() == [float(n)] * 4
    same = hvd.allreduce_(t, op=hvd.Sum)
    assert same is t and t.tolist() == [float(n)] * 4


def test_allreduce_non_contiguous():
    base = torch.arange(12.0).reshape(3, 4) * (hvd.rank() + 1)
    view = base.t()
    out = hvd.allreduce(view, op=hvd.Sum)
    n = hvd.size()
    assert torch.equal(out, torch.arange(12.0).reshape(3, 4).t() * (n * (n + 1) // 2))
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4) * (n * (n + 1) // 2))


def test_async_poll_synchronize_by_name():
    n = hvd.size()
    names = [f"async.{i}" for i in range(4)]
    order = names if hvd.rank() % 2 == 0 else list(reversed(names))  # any order per rank
    tensors = {name: torch.full((3,), float(i)) for i, name in enumerate(names)}
    handles = {name: hvd.allreduce_async_(tensors[name], name=name, op=hvd.Sum) for name in order}
    for name, h in handles.items():
        out = hvd.synchronize(h)
        assert out is tensors[name]
        assert out.tolist() == [float(names.index(name) * n)] * 3
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h).tolist() == [float(n)] * 2
    with pytest.raises(ValueError):
        hvd.poll(h)  # synchronized already


def test_grouped_allreduce():
    n = hvd.size()
    ts = [torch.full((i + 1,), float(hvd.rank() + i)) for i in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for i, out in enumerate(outs):
        assert out.tolist() == [float(sum(r + i for r in range(n)))] * (i + 1)
    res = hvd.grouped_allreduce_(ts, op=hvd.Average)
    assert res[0] is ts[0]
    h = hvd.grouped_allreduce_async([torch.ones(2), torch.ones(3)], op=hvd.Sum)
    assert [o.tolist() for o in hvd.synchronize(h)] == [[float(n)] * 2, [float(n)] * 3]


def test_allgather_uneven_rows():
    r, n = hvd.rank(), hvd.size()
    t = torch.full((r + 1, 2), r, dtype=torch.int64)
    out = hvd.allgather(t)
    expect = torch.cat([torch.full((i + 1, 2), i, dtype=torch.int64) for i in range(n)])
    assert torch.equal(out, expect)
    outs = hvd.grouped_allgather([t, t.double()])
    assert torch.equal(outs[0], expect) and torch.equal(outs[1], expect.double())
    assert torch.equal(hvd.synchronize(hvd.allgather_async(t)), expect)


def test_broadcast_forms():
    n = hvd.size()
    root = n - 1
    t = torch.full((3, 2), float(hvd.rank()))
    out = hvd.broadcast(t, root_rank=root)
    assert out.tolist() == [[float(root)] * 2] * 3 and t[0, 0].item() == hvd.rank()
    same = hvd.broadcast_(t, root_rank=root)
    assert same is t and t.tolist() == [[float(root)] * 2] * 3
    u = torch.full((2,), float(hvd.rank()))
    assert hvd.synchronize(hvd.broadcast_async_(u, 0)) is u and u.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError):
        hvd.broadcast(t, root_rank=n)


def test_alltoall_equal_and_with_splits():
    r, n = hvd.rank(), hvd.size()
    t = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    out = hvd.alltoall(t)
    expect = torch.cat([torch.tensor([2.0 * r, 2.0 * r + 1]) + 100 * i for i in range(n)])
    assert torch.equal(out, expect)
    # Rank r sends i + 1 rows to rank i.
    splits = torch.tensor([i + 1 for i in range(n)], dtype=torch.int32)
    rows = torch.full((int(splits.sum()), 2), float(r))
    out, received = hvd.alltoall(rows, splits=splits)
    assert received.tolist() == [r + 1] * n
    assert torch.equal(out, torch.cat([torch.full((r + 1, 2), float(i)) for i in range(n)]))


def test_reducescatter():
    r, n = hvd.rank(), hvd.size()
    rows = 2 * n + 1
    t = torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) * (r + 1)
    out = hvd.reducescatter(t, op=hvd.Sum)
    full = torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) * (n * (n + 1) // 2)
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:r])
    assert torch.equal(out, full[start:start + counts[r]])
    avg = hvd.reducescatter(t)
    assert torch.allclose(avg, full[start:start + counts[r]] / n)
    outs = hvd.grouped_reducescatter([t, t], op=hvd.Sum)
    assert all(torch.equal(o, out) for o in outs)
    with pytest.raises(ValueError):
        hvd.reducescatter(t, op=hvd.Max)


def test_sparse_allreduce():
    r, n = hvd.rank(), hvd.size()
    t = torch.sparse_coo_tensor(torch.tensor([[r % 3]]), torch.tensor([1.0 + r]), (3,))
    h = hvd.sparse_allreduce_async(t, name="sparse", op=hvd.Sum)
    dense = hvd.synchronize(h).to_dense()
    expect = torch.zeros(3)
    for i in range(n):
        expect[i % 3] += 1.0 + i
    assert torch.equal(dense, expect)


def test_compression_fp16():
    out = hvd.allreduce(torch.full((4,), 0.5, dtype=torch.float32), op=hvd.Sum,
                        compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32 and out.tolist() == [0.5 * hvd.size()] * 4


def test_autograd_allreduce_allgather_broadcast():
    n, r = hvd.size(), hvd.rank()
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum).sum().backward()
    assert x.grad.tolist() == [float(n)] * 3  # the allreduce of ones, summed
    y = torch.ones(2, 2, requires_grad=True)
    (hvd.allgather(y) * 2).sum().backward()
    assert y.grad.tolist() == [[2.0, 2.0]] * 2
    z = torch.ones(2, requires_grad=True)
    hvd.broadcast(z, root_rank=0).sum().backward()
    assert z.grad.tolist() == ([1.0, 1.0] if r == 0 else [0.0, 0.0])


def test_autograd_alltoall_and_reducescatter():
    n = hvd.size()
    x = torch.ones(n * 2, requires_grad=True)
    (hvd.alltoall(x) * 3).sum().backward()
    assert x.grad.tolist() == [3.0] * (n * 2)
    y = torch.ones(n, 2, requires_grad=True)
    hvd.reducescatter(y, op=hvd.Sum).sum().backward()
    assert y.grad.tolist() == [[1.0, 1.0]] * n


def test_mismatched_shapes_raise_on_every_rank():
    shape = (2, 3) if hvd.rank() == 0 else (3, 3)
    if hvd.size() == 1:
        pytest.skip("needs 2 ranks")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(torch.ones(shape), name="mismatch")
    with pytest.raises(RuntimeError):  # HorovodInternalError is one
        hvd.allgather(torch.ones(1, 2 + hvd.rank()), name="mismatch.gather")
    # The job still works afterwards.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


def test_unknown_op_and_bad_process_set():
    with pytest.raises(ValueError, match="unknown op"):
        hvd.allreduce(torch.ones(1), op=42)
    with pytest.raises(ValueError, match="ProcessSet"):
        hvd.allreduce(torch.ones(1), process_set=[0, 1])


def test_objects():
    r, n = hvd.rank(), hvd.size()
    assert hvd.broadcast_object({"rank": r, "big": "x" * (1000 * r)}, root_rank=n - 1) == \
        {"rank": n - 1, "big": "x" * (1000 * (n - 1))}
    assert hvd.allgather_object(("r", r, [r] * r)) == [("r", i, [i] * i) for i in range(n)]


def test_adasum():
    n, r = hvd.size(), hvd.rank()
    if n & (n - 1):
        with pytest.raises(NotImplementedError, match="power of 2"):
            hvd.allreduce(torch.ones(2), op=hvd.Adasum)
        return
    # Orthogonal gradients add up; equal ones stay as they are.
    e = torch.zeros(4, dtype=torch.float64)
    e[r] = 1.0
    assert hvd.allreduce(e, op=hvd.Adasum).tolist() == [1.0] * n + [0.0] * (4 - n)
    same = torch.full((3,), 2.0, dtype=torch.float64)
    assert torch.allclose(hvd.allreduce(same, op=hvd.Adasum), same)
