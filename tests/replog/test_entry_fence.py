"""The envelope's serialization and the fencing rule."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog import Entry, InvariantViolation
from replog.fence import Fence, Verdict


@given(
    writer_id=st.integers(-1, 2**62),
    seq=st.integers(0, 2**62),
    ts=st.integers(0, 2**62),
    kind=st.text(max_size=40),
    payload=st.binary(max_size=200),
)
def test_encode_decode_round_trip(writer_id, seq, ts, kind, payload):
    e = Entry(-1, writer_id, ts, kind, payload, seq)
    back = Entry.decode(e.encode(), offset=17)
    assert back == Entry(17, writer_id, ts, kind, payload, seq)


def test_decode_rejects_unknown_version_and_truncation():
    data = bytearray(Entry(0, 1, 2, "k", b"p", 3).encode())
    with pytest.raises(InvariantViolation):
        Entry.decode(bytes(data[:5]))
    data[0] = 99
    with pytest.raises(InvariantViolation, match="version"):
        Entry.decode(bytes(data))


def test_fence_ignores_smaller_writers_and_duplicates():
    f = Fence()
    assert f.admit(3, 0) is Verdict.ACCEPT
    assert f.admit(3, 1) is Verdict.ACCEPT
    assert f.admit(3, 1) is Verdict.DUPLICATE
    assert f.admit(5, 0) is Verdict.ACCEPT  # a new leader starts its own sequence
    assert f.admit(3, 2) is Verdict.FENCED  # the deposed leader's late write
    assert (f.writer_id, f.seq) == (5, 0)


def test_fence_restored_from_a_checkpoint_keeps_fencing():
    f = Fence(writer_id=7, seq=4)
    assert f.admit(6, 100) is Verdict.FENCED
    assert f.admit(7, 4) is Verdict.DUPLICATE
    assert f.admit(7, 5) is Verdict.ACCEPT
