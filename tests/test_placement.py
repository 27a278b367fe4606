"""Ranks of workers that a cluster manager placed (Ray actors, Spark tasks)."""

from __future__ import annotations

from ring_strategy import _contracts as names
from ring_strategy.runner.placement import place, placement_environment


def test_place_numbers_ranks_node_by_node():
    placements = place([("a", "10.0.0.1"), ("b", "10.0.0.2"), ("a", "10.0.0.1"), ("b", "10.0.0.2")])
    assert [(p.worker, p.rank, p.local_rank, p.cross_rank) for p in placements] == [
        (0, 0, 0, 0), (2, 1, 1, 0), (1, 2, 0, 1), (3, 3, 1, 1)]
    assert {(p.local_size, p.cross_size) for p in placements} == {(2, 2)}


def test_placement_environment_advertises_the_host_only_across_hosts():
    common = dict(size=2, rendezvous_address="10.0.0.1:5", secret=b"s", job_id="j", start_timeout=9)
    one_host = [placement_environment(p, **common) for p in place([("a", "10.0.0.1"), ("a", "10.0.0.1")])]
    assert [e[names.LOCAL_RANK] for e in one_host] == ["0", "1"]
    assert all(names.ADVERTISE_HOST not in e and e[names.HOSTNAME] == "a" for e in one_host)
    two_hosts = [placement_environment(p, **common) for p in place([("a", "10.0.0.1"), ("b", "10.0.0.2")])]
    assert [e[names.ADVERTISE_HOST] for e in two_hosts] == ["10.0.0.1", "10.0.0.2"]
    assert [e[names.CROSS_RANK] for e in two_hosts] == ["0", "1"]
