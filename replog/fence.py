"""The fencing rule: accept an entry only if its (writer_id, seq) is above every one accepted.

A smaller writer_id comes from a deposed leader (e.g. one that paused past its session timeout
and wrote afterwards); a repeated (writer_id, seq) is a duplicate append. Every reader applies
the same rule to the same log, so every replica skips the same entries.
"""

from __future__ import annotations

import enum


class Verdict(enum.Enum):
    ACCEPT = "accept"
    FENCED = "fenced"
    DUPLICATE = "duplicate"


class Fence:
    """Tracks the largest writer id and, for that writer, the largest seq accepted."""

    def __init__(self, writer_id: int = -1, seq: int = -1):
        self.writer_id = writer_id
        self.seq = seq

    def judge(self, writer_id: int, seq: int) -> Verdict:
        """The verdict for an entry, without changing the fence."""
        if writer_id < self.writer_id:
            return Verdict.FENCED
        if writer_id == self.writer_id and seq <= self.seq:
            return Verdict.DUPLICATE
        return Verdict.ACCEPT

    def admit(self, writer_id: int, seq: int) -> Verdict:
        verdict = self.judge(writer_id, seq)
        if verdict is Verdict.ACCEPT:
            self.writer_id, self.seq = writer_id, seq
        return verdict
