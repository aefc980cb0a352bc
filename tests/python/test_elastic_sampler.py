"""ElasticSampler's partitioning (one process: hvd.init() makes a job of
one rank, the sampler's rank and size are set by hand as after a reset)."""

import hvactor.torch as hvd


def shares(sampler, size):
    out = []
    for r in range(size):
        sampler.num_replicas, sampler.rank = size, r
        out.append(sampler.get_indices())
    return out


def test_partitions_and_resumes_after_a_reset():
    data = list(range(10))
    s = hvd.elastic.ElasticSampler(data, shuffle=False)
    s.reset()
    s.num_replicas = 2
    s.num_samples = 5
    s.total_size = 10
    assert shares(s, 2) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    s.record_batch(0, 2)  # 2 samples on each of 2 ranks: 4 done
    state = s.state_dict()
    assert state == {"epoch": 0, "processed_num": 4}
    t = hvd.elastic.ElasticSampler(data, shuffle=False)
    t.load_state_dict(state)
    # The 6 left over 4 ranks (a world that grew): padded to 8, 2 each.
    t.num_replicas = 4
    t.num_samples = 2
    t.total_size = 8
    got = shares(t, 4)
    assert {i for share in got for i in share} == {4, 5, 6, 7, 8, 9}  # none done twice
    assert all(len(share) == 2 for share in got)


def test_shuffle_is_the_same_on_every_rank_and_changes_by_epoch():
    a = hvd.elastic.ElasticSampler(range(20), seed=3)
    b = hvd.elastic.ElasticSampler(range(20), seed=3)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and sorted(a) == list(range(20))
