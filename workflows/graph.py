"""Graph helpers over a workflow's edges: cycles, reachability, dominators.

Pure functions over ``succ``: node id -> ordered list of (edge id, target id), where targets
may name missing nodes (callers report those; here they are skipped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Succ = Mapping[str, Sequence[tuple[str, str]]]


def cycle_edges(succ: Succ) -> list[tuple[str, str]]:
    """(node id, edge id) of every edge on some cycle: both ends in one strongly connected
    component (Kosaraju, iterative), self-loops included. Empty for an acyclic graph."""
    finished: list[str] = []
    seen: set[str] = set()
    for start in succ:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(succ[start]))]
        while stack:
            node, it = stack[-1]
            for _, to in it:
                if to in succ and to not in seen:
                    seen.add(to)
                    stack.append((to, iter(succ[to])))
                    break
            else:
                finished.append(node)
                stack.pop()
    preds: dict[str, list[str]] = {n: [] for n in succ}
    for n, edges in succ.items():
        for _, to in edges:
            if to in preds:
                preds[to].append(n)
    component: dict[str, int] = {}
    for root in reversed(finished):
        if root in component:
            continue
        component[root] = len(component)
        label, todo = component[root], [root]
        while todo:
            for p in preds[todo.pop()]:
                if p not in component:
                    component[p] = label
                    todo.append(p)
    return [(n, edge_id) for n, edges in succ.items() for edge_id, to in edges
            if to in component and component[to] == component[n]]


def reachable(succ: Succ, root: str) -> set[str]:
    seen = {root} if root in succ else set()
    todo = list(seen)
    while todo:
        for _, to in succ[todo.pop()]:
            if to in succ and to not in seen:
                seen.add(to)
                todo.append(to)
    return seen


def topological(succ: Succ, nodes: set[str]) -> list[str]:
    """Kahn's order of ``nodes`` (assumed acyclic), ties broken by declaration order."""
    indeg = {n: 0 for n in nodes}
    for n in nodes:
        for _, to in succ[n]:
            if to in indeg:
                indeg[to] += 1
    order = [n for n in succ if n in nodes and indeg[n] == 0]
    i = 0
    while i < len(order):
        for _, to in succ[order[i]]:
            if to in indeg:
                indeg[to] -= 1
                if indeg[to] == 0:
                    order.append(to)
        i += 1
    return order


def dominators(succ: Succ, root: str, nodes: set[str]) -> dict[str, frozenset[str]]:
    """For an acyclic graph: the nodes on every path from ``root`` to each node, itself included."""
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    for n in nodes:
        for _, to in succ[n]:
            if to in preds:
                preds[to].append(n)
    dom: dict[str, frozenset[str]] = {}
    for n in topological(succ, nodes):
        incoming = [dom[p] for p in preds[n] if p in dom]
        common = frozenset.intersection(*incoming) if incoming and n != root else frozenset()
        dom[n] = common | {n}
    return dom


def ancestors(succ: Succ, node: str, nodes: set[str]) -> set[str]:
    """Nodes with a path to ``node`` (itself excluded), within ``nodes``."""
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    for n in nodes:
        for _, to in succ[n]:
            if to in preds:
                preds[to].append(n)
    seen: set[str] = set()
    todo = [node]
    while todo:
        for p in preds.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    seen.discard(node)
    return seen
