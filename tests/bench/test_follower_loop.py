"""bench/follower_loop.py: the paced reader hands the feed out as a follower's fetches would,
and a follower node applies every record of it (no Kafka)."""

import threading

from bench.apply_cost import build_feed
from bench.follower_loop import PacedReader, records_of, run


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
