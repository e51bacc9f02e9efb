"""bench/profile_node.py: the summary of py-spy's raw samples (idle stacks left out)."""

from pathlib import Path

from bench.profile_node import summarize, thread_table


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


def test_thread_table_per_order_with_unnamed_threads_summed_by_kernel_name(tmp_path: Path):
    raw = tmp_path / "prof.txt"
    raw.write_text("thread (11): replog-loop;loop (d.py:3) 10\n"
                   "thread (12): MainThread;run (a.py:1) 5\n")
    before = {11: (1.0, 0.0), 12: (0.5, 0.5), 99_001: (0.0, 0.0)}
    after = {11: (1.2, 0.1), 12: (0.6, 0.5), 99_001: (0.01, 0.02), 99_002: (0.0, 0.03)}
    out = thread_table(0, before, after, raw, ok=1_000).splitlines()
    assert out[0].endswith("total 460:")
    assert out[1].split() == ["300.0", "=", "200.0", "+", "100.0", "replog-loop"]
    assert out[2].split() == ["100.0", "=", "100.0", "+", "0.0", "MainThread"]
    # threads with no Python frame (pid 0 has no /proc entries: named "?"), one row
    assert out[3].split() == ["60.0", "=", "10.0", "+", "50.0", "native", "?"]
