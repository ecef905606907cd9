"""Dynamic prefix-aware scheduling (FastTTS section 4.2, Appendix A).

Each iteration the runtime submits the beams in an order; under a tight KV budget the engine
admits them in that order, so consecutive beams that share a long prefix reuse its cached
blocks, while an order that alternates lineages evicts and recomputes them.

- `baseline_order` is search-and-learn's: the kept beams are duplicated round-robin
  (`(active_beams * repeats)[:n]`), so siblings are spread across the batch.
- `prefix_aware_order` keeps the greedy invariant of section 4.2: the children of one parent
  are consecutive, and parents keep their relative order of the previous iteration. By
  induction the order is a depth-first order of the search trie, so every CoT is followed by
  one sharing the longest available prefix.
- `schedule_cost` is the trie cost model: the ordered CoTs are cut into consecutive groups that
  fit the memory (each group a trie T_i), and Cost = sum_i Nodes(T_i) - P(T_i, T_i+1), where
  Nodes counts a trie's beams and P the beams two consecutive tries share. With one CoT per
  trie (Appendix A.2's single-CoT assumption) it is sum_i |c_i| - LCP(c_i, c_i+1).
"""

from __future__ import annotations

from collections.abc import Sequence

from fasttts.beam import Beam

__all__ = ["adversarial_order", "baseline_order", "batch_kv_blocks", "prefix_aware_order",
           "schedule_cost", "shared_prefix"]


def _groups(children: list[Beam], previous: Sequence[int]) -> list[list[Beam]]:
    """Children grouped by parent (branch order inside), parents in their order in `previous`
    (the last iteration's submission order); unknown parents after, in first-seen order."""
    rank = {beam_id: i for i, beam_id in enumerate(previous)}
    groups: dict[int | None, list[Beam]] = {}
    for c in children:
        groups.setdefault(c.parent_id, []).append(c)
    first_seen = {pid: i for i, pid in enumerate(groups)}
    parents = sorted(groups, key=lambda pid: (pid not in rank, rank.get(pid, 0), first_seen[pid]))
    return [sorted(groups[pid], key=lambda b: b.branch) for pid in parents]


def baseline_order(children: list[Beam], previous: Sequence[int] = ()) -> list[Beam]:
    """Search-and-learn's duplication order (`(active_beams * repeats)[:n]`): one child of
    each parent in turn (round-robin), parents in their previous-iteration order."""
    out, queues = [], _groups(children, previous)
    depth = 0
    while len(out) < len(children):
        out += [q[depth] for q in queues if depth < len(q)]
        depth += 1
    return out


def prefix_aware_order(children: list[Beam], previous: Sequence[int] = ()) -> list[Beam]:
    """Children grouped by parent (branch order within a group), parents in the order they
    were submitted in the previous iteration (`previous`: beam ids in submission order);
    parents not in it keep their given order, after those that are."""
    return [c for group in _groups(children, previous) for c in group]


def adversarial_order(children: list[Beam]) -> list[Beam]:
    """The greedy invariant inverted (the worst case of FastTTS Fig. 18 left): starting from
    the first child, always take next the one whose CoT shares the *fewest* leading nodes
    with the last one taken (ties: the earliest), so lineages alternate as much as they can."""
    left, order = list(children[1:]), list(children[:1])
    while left:
        nxt = min(left, key=lambda b: shared_prefix(order[-1].lineage, b.lineage))
        order.append(nxt)
        left.remove(nxt)
    return order


def batch_kv_blocks(paths: Sequence[Sequence[int]], block_size: int) -> int:
    """KV blocks a batch of `paths` (token ids, prompt included) holds together with prefix
    caching: every full `block_size`-token block, identified by its tokens and everything
    before it (vLLM's block hash chain), counted once however many paths share it; a path's
    partial last block is not counted (it is not shareable).

    Raises:
        ValueError: block_size < 1.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1 token, got {block_size}")
    blocks: dict[tuple[int, tuple[int, ...]], int] = {}  # (parent block, tokens) -> block
    for ids in paths:
        parent = -1
        for end in range(block_size, len(ids) + 1, block_size):
            parent = blocks.setdefault((parent, tuple(ids[end - block_size:end])), len(blocks))
    return len(blocks)


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """P: the number of leading nodes two CoTs (root-to-leaf beam ids) share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def schedule_cost(cots: list[Sequence[int]], capacity: int | None = None) -> int:
    """Cost = sum_i Nodes(T_i) - P(T_i, T_i+1) of CoTs taken in the given order (module
    docstring).

    Args:
        cots: each CoT as its root-to-leaf beam ids, in schedule order.
        capacity: most distinct nodes one trie (one memory-full batch) holds; None = one CoT
            per trie (the single-CoT assumption).

    Returns:
        The eviction cost in nodes (the last trie's nodes count: they are evicted at the end).
    """
    tries: list[set] = []
    for cot in cots:
        nodes = {tuple(cot[:k + 1]) for k in range(len(cot))}
        if tries and capacity is not None and len(tries[-1] | nodes) <= capacity:
            tries[-1] |= nodes
        else:
            tries.append(nodes)
    cost = 0
    for i, t in enumerate(tries):
        cost += len(t)
        if i + 1 < len(tries):
            cost -= len(t & tries[i + 1])
    return cost
