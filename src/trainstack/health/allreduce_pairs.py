"""Which node pair, and which node, holds the all-reduce between nodes back. Pure.

Each pair of nodes is measured on its own at the sweep's largest size. A node is as fast as its
best pair: a node whose every pair is slow is the one holding the others back (its link, its
CPU), while a healthy node has at least one fast pair, with another healthy node. The reference
is therefore the median of the nodes' best pairs, and a pair below SLOW_PAIR of it is slow. (The
median of the pairs themselves hides a slow node among three: two of the three pairs hold it.)
With two nodes there is one pair and nothing to compare it with."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

SLOW_PAIR = 0.9  # a pair below this fraction of the median of the nodes' best pairs is slow


def best_pairs(pairs: Iterable[tuple[Sequence[str], float]]) -> dict[str, float]:
    """Each node's best pair bus bandwidth, from (the pair's two nodes, its busbw)."""
    best: dict[str, float] = {}
    for nodes, busbw in pairs:
        for node in nodes:
            best[node] = max(busbw, best.get(node, busbw))
    return best


def mark_slow(pairs: list[dict]) -> list[dict]:
    """Each pair (``nodes``, ``busbw_gbps``) with ``slow`` added; never slow with fewer than two pairs."""
    best = best_pairs((p["nodes"], p["busbw_gbps"]) for p in pairs)
    reference = statistics.median(best.values()) if best else 0.0
    return [{**p, "slow": len(pairs) > 1 and p["busbw_gbps"] < SLOW_PAIR * reference} for p in pairs]
