"""Walks over a task graph, on :mod:`graphlib`: the topological order (ties in definition
order), a cycle as a path, and the descendants and ancestors of tasks. Pure: the graph is a
mapping node -> its upstream nodes, or a DAG."""

from __future__ import annotations

import graphlib
import heapq
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from beatflow.dag.model import DAG

N = TypeVar("N", bound=Hashable)


def topological_order(upstream: Mapping[N, Iterable[N]]) -> list[N]:
    """The nodes so that each comes after its upstream, ties broken by the mapping's order.
    Upstream nodes missing from the mapping are ignored. Raises :class:`graphlib.CycleError`
    (``args[1]``: the cycle) if the graph has one."""
    position = {node: i for i, node in enumerate(upstream)}
    sorter = graphlib.TopologicalSorter(
        {node: [u for u in ups if u in position] for node, ups in upstream.items()}
    )
    sorter.prepare()
    heap = [(position[node], node) for node in sorter.get_ready()]
    heapq.heapify(heap)
    order: list[N] = []
    while heap:
        _, node = heapq.heappop(heap)
        order.append(node)
        sorter.done(node)
        for ready in sorter.get_ready():
            heapq.heappush(heap, (position[ready], ready))
    return order


def find_cycle(upstream: Mapping[str, Iterable[str]]) -> list[str]:
    """A cycle as a path ``[a, b, ..., a]`` (each node upstream of the next, starting at the
    smallest), or ``[]`` if the graph is acyclic."""
    graph = {node: sorted(upstream[node]) for node in sorted(upstream)}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return cycle_path(exc)
    return []


def cycle_path(exc: graphlib.CycleError) -> list[str]:
    """The cycle a CycleError names, as a path starting (and ending) at its smallest node."""
    cycle: list[str] = list(exc.args[1])[:-1]
    start = cycle.index(min(cycle))
    cycle = cycle[start:] + cycle[:start]
    return [*cycle, cycle[0]]


def descendants(dag: DAG, task_ids: Iterable[str]) -> set[str]:
    """The tasks downstream of any of ``task_ids``, directly or not (a given task is in the
    result only if it is downstream of another). Unknown ids have no descendants."""
    return _reach(dag.downstream_map(), task_ids)


def ancestors(dag: DAG, task_ids: Iterable[str]) -> set[str]:
    """The tasks upstream of any of ``task_ids``, directly or not (a given task is in the result
    only if it is upstream of another). Unknown ids have no ancestors."""
    return _reach(dag.upstream_map(), task_ids)


def _reach(edges: Mapping[str, Iterable[str]], start: Iterable[str]) -> set[str]:
    out: set[str] = set()
    stack = list(start)
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in out:
                out.add(nxt)
                stack.append(nxt)
    return out
