"""Graph helpers against brute force on random graphs."""

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows import graph


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 8))
    names = [f"v{i}" for i in range(n)]
    pairs = draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)), max_size=16))
    succ = {v: [] for v in names}
    for i, (a, b) in enumerate(pairs):
        succ[a].append((f"e{i}", b))
    return succ


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_cycle_edges_are_exactly_edges_whose_source_is_reachable_from_their_target(succ):
    expected = {(a, e) for a, edges in succ.items() for e, b in edges
                if a in graph.reachable(succ, b)}
    assert set(graph.cycle_edges(succ)) == expected


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_dominators_are_on_every_path(succ):
    if graph.cycle_edges(succ):
        return
    reach = graph.reachable(succ, "v0")
    dom = graph.dominators(succ, "v0", reach)
    for node in reach:
        for d in reach - {node}:
            # d dominates node iff removing d disconnects node from the root
            cut = {v: [(e, t) for e, t in es if t != d] for v, es in succ.items() if v != d}
            blocked = d == "v0" or node not in graph.reachable(cut, "v0")
            assert (d in dom[node]) == blocked
