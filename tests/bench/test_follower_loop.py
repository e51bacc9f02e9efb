"""bench/follower_loop.py: the paced reader hands the feed out as a follower's fetches would,
and a follower node applies every record of it (no Kafka)."""

import threading

from bench.apply_cost import build_feed
from bench.follower_loop import FetchingReader, PacedReader, records_of, run


def test_the_reader_hands_out_the_warm_up_at_once_then_a_few_per_poll():
    records = [(i, b"r%d" % i) for i in range(12)]
    go = threading.Event()
    reader = PacedReader(records, 0, 5, per_wake=3, gap_s=0.0, go=go)
    assert [o for o, _ in reader.poll(0.01, 1000)] == [0, 1, 2, 3, 4]
    assert reader.poll(0.01, 1000) == []  # measured records wait for ``go``
    go.set()
    assert [o for o, _ in reader.poll(0.01, 1000)] == [5, 6, 7]
    assert [len(reader.poll(0.01, 1000)) for _ in range(3)] == [3, 1, 0]


def test_a_follower_node_applies_every_record_paced_or_not():
    feed, measured_from, _ = build_feed(60, seed=3, confirm_every=20)
    records = records_of(feed)
    for per_wake, gap_ms in ((5, 1.0), (0, 0.0)):
        loop_us, process_us = run(records, measured_from, 60, per_wake, gap_ms)
        assert 0 < loop_us <= process_us


def test_the_fetching_reader_hands_out_what_arrived_by_the_last_fetch_and_every_record(
        monkeypatch):
    from bench import follower_loop

    monkeypatch.setattr(follower_loop, "arrival_rate", 1000.0)  # a record per ms
    records = [(i, b"r%d" % i) for i in range(40)]
    go = threading.Event()
    reader = FetchingReader(records, 0, 5, per_wake=0, gap_s=0.0, go=go)
    assert [o for o, _ in reader.poll(0.01, 1000)] == [0, 1, 2, 3, 4]
    assert reader.poll(0.01, 1000) == []  # measured records wait for ``go``
    go.set()
    got = []
    while len(got) < 35:
        batch = reader.poll(1.0, 1000)
        got += [o for o, _ in batch]
        assert len(batch) % 10 == 0 or got[-1:] == [39]  # whole fetches of 10 ms
    assert got == list(range(5, 40))


def test_a_follower_node_applies_every_record_that_arrives_lingering_or_not(monkeypatch):
    from replog import node as node_module

    feed, measured_from, _ = build_feed(60, seed=3, confirm_every=20)
    records = records_of(feed)
    for linger_s in (0.0, 0.02):
        monkeypatch.setattr(node_module, "follower_linger_s", linger_s)
        loop_us, process_us = run(records, measured_from, 60, 0, 0.0, arriving=True)
        assert 0 < loop_us <= process_us
