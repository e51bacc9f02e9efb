"""bench/profile_node.py: the summary of py-spy's raw samples (idle stacks left out)."""

from pathlib import Path

from bench.profile_node import summarize


def test_summary_leaves_waits_out_and_ranks_threads(tmp_path: Path) -> None:
    raw = tmp_path / "prof.txt"
    raw.write_text(
        "thread (1): MainThread;run (a.py:1);handle (b.py:2);dumps (c.so) 30\n"
        "thread (1): MainThread;run (a.py:1);Condition.wait (threading.py:327) 500\n"
        "thread (2): worker;loop (d.py:3);apply (e.py:4) 10\n"
        "thread (2): worker;loop (d.py:3);lock_PyThread_acquire_lock (libpython) 900\n")
    out = summarize(raw, top=5)
    assert out.startswith("busy samples: 40")
    main_at, worker_at = out.index("== MainThread: 75.0%"), out.index("== worker: 25.0%")
    assert main_at < worker_at
    assert "75.0%  handle (b.py:2)  [dumps (c.so)]" in out
    assert "Condition.wait" not in out and "acquire_lock" not in out
