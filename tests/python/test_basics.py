"""init, ranks and sizes, the *_built() queries, process sets, barrier and
join, as horovod.torch's tests expect."""

import os

import pytest
import torch

import hvactor.torch as hvd


def test_ranks_and_sizes_match_the_launcher():
    assert hvd.is_initialized()
    assert hvd.rank() == int(os.environ["HOROVOD_RANK"])
    assert hvd.size() == int(os.environ["HOROVOD_SIZE"])
    assert hvd.local_rank() == int(os.environ["HOROVOD_LOCAL_RANK"])
    assert hvd.local_size() == int(os.environ["HOROVOD_LOCAL_SIZE"])
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1  # one machine
    assert hvd.is_homogeneous()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))


def test_built_queries():
    assert hvd.gloo_built() and hvd.gloo_enabled()
    assert not hvd.mpi_built() and not hvd.mpi_enabled() and not hvd.mpi_threads_supported()
    assert not hvd.ddl_built() and not hvd.ccl_built() and not hvd.rocm_built()
    assert hvd.nccl_built() == hvd.cuda_built()


def test_op_constants_are_horovods():
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


def test_barrier_and_join():
    hvd.barrier()
    # Rank 0 runs out of data first: its join takes part in the others'
    # allreduces with zeros, which still divide by size() (Horovod's rule).
    r, n = hvd.rank(), hvd.size()
    if r != 0:
        t = hvd.allreduce(torch.full((4,), float(r)), name="join.extra", op=hvd.Sum)
        assert t.tolist() == [float(sum(range(1, n)))] * 4
    last = hvd.join()
    assert 0 <= last < n
    assert hvd.allgather_object(last) == [last] * n


def test_dynamic_process_sets_are_refused_without_init_dynamic():
    with pytest.raises(Exception) as e:
        hvd.add_process_set([0])
    assert "HOROVOD_DYNAMIC_PROCESS_SETS" in str(e.value) or "dynamic" in str(e.value)


def test_process_set_collectives():
    n = hvd.size()
    if n < 2:
        pytest.skip("needs 2 ranks")
    hvd.shutdown()
    even = hvd.ProcessSet(range(0, n, 2))
    odd = hvd.ProcessSet(range(1, n, 2))
    hvd.init(process_sets=[even, odd])
    try:
        assert even.process_set_id and odd.process_set_id and even.process_set_id != odd.process_set_id
        mine = even if hvd.rank() % 2 == 0 else odd
        assert mine.included() and mine.rank() == hvd.rank() // 2
        t = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum, process_set=mine)
        assert t.item() == float(sum(mine.ranks))
        g = hvd.allgather(torch.tensor([hvd.rank()]), process_set=mine)
        assert g.tolist() == mine.ranks
        # root_rank is a rank of the job, one of the set's (Horovod's rule).
        b = hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=mine.ranks[-1], process_set=mine)
        assert b.item() == mine.ranks[-1]
        assert hvd.broadcast_object(hvd.rank(), root_rank=mine.ranks[0],
                                    process_set=mine) == mine.ranks[0]
        with pytest.raises(ValueError, match="root_rank"):
            hvd.broadcast(torch.ones(1), root_rank=(mine.ranks[0] + 1) % n, process_set=mine)
        hvd.barrier(process_set=mine)
        other = odd if mine is even else even
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))  # never registered
        assert not other.included()
    finally:
        hvd.shutdown()
        hvd.init()
    assert even.process_set_id is None  # gone with the shutdown


def test_dynamic_process_sets():
    n = hvd.size()
    hvd.shutdown()
    hvd.init(process_sets="dynamic")
    try:
        ps = hvd.add_process_set([0, n - 1] if n > 1 else [0])
        if ps.included():
            t = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=ps)
            assert t.tolist() == [float(len(ps.ranks))] * 2
        assert hvd.remove_process_set(ps)
        assert ps.process_set_id is None
        assert not hvd.remove_process_set(hvd.global_process_set)
    finally:
        hvd.shutdown()
        hvd.init()


def test_timeline(tmp_path):
    path = str(tmp_path / f"timeline.{hvd.rank()}.json")
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(8), name="timeline.allreduce")
    hvd.stop_timeline()
    # Rank 0 writes the job's timeline (Horovod's rule); the others none.
    assert os.path.exists(path) == (hvd.rank() == 0)
    if hvd.rank() == 0:
        assert '"timeline.allreduce"' in open(path).read()
