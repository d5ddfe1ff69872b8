"""The best-first tree build: the first N rank paths in the order (score descending, rank
path ascending), found with the reference heap of docs/ddtree.md."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from python_engine.ddtree.arrays import as_numpy


@dataclass
class Tree:
    """A draft tree. Index 0 is the root (the previous bonus token); nodes 1..n follow in
    best-first order, so parent[i] < i.

    tokens: int64 [n+1], tokens[0] = root token (-1 if unknown)
    depth:  int32 [n+1], depth[0] = 0
    parent: int32 [n+1], parent[0] = -1
    score:  float32 [n+1], score[0] = 0; the path's summed log-probability
    ranks:  rank path of each node (ranks[0] = ())
    """

    n: int
    tokens: np.ndarray
    depth: np.ndarray
    parent: np.ndarray
    score: np.ndarray
    ranks: list[tuple[int, ...]]

    def positions(self, start: int) -> np.ndarray:
        """Sequence positions for the verify pass: root at start, a node at start+depth."""
        return start + self.depth.astype(np.int64)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if self.n else 0

    def prefix(self, n: int) -> "Tree":
        """The tree of its first n nodes (root included as ever). The build adds nodes in the
        tree order, so this is exactly the tree a budget of n gives from the same inputs."""
        n = max(0, min(int(n), self.n))
        return Tree(n=n, tokens=self.tokens[: n + 1].copy(), depth=self.depth[: n + 1].copy(),
                    parent=self.parent[: n + 1].copy(), score=self.score[: n + 1].copy(),
                    ranks=self.ranks[: n + 1])

    def children(self) -> list[dict[int, int]]:
        """For each node, its children by token (siblings carry distinct tokens)."""
        kids: list[dict[int, int]] = [{} for _ in range(self.n + 1)]
        for i in range(1, self.n + 1):
            kids[int(self.parent[i])][int(self.tokens[i])] = i
        return kids


def build_tree(logp, tok, budget: int, root_token: int = -1) -> Tree:
    """Build the DDTree of at most `budget` nodes from per-depth top-K arrays.

    logp: float32 [D, K], descending along K (ties by lower token id, see topk_logprobs)
    tok:  int [D, K], the tokens of those columns
    A node's score is its parent's score + logp[depth-1, rank], summed in float32 from
    depth 0 down, exactly as the GPU kernel sums. Budget 0, D = 0 or K = 0 give a
    root-only tree.
    """
    logp = np.asarray(as_numpy(logp), dtype=np.float32)
    tok = np.asarray(as_numpy(tok), dtype=np.int64)
    if logp.ndim != 2 or tok.shape != logp.shape:
        raise ValueError(f"logp and tok must both be [D, K]; got {logp.shape} and {tok.shape}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if np.isnan(logp).any():
        raise ValueError("logp contains NaN")
    # Preconditions of the best-first order: a child never outscores its parent and a
    # sibling never outscores its left neighbour.
    if (logp > 0).any():
        raise ValueError("logp must hold log-probabilities (<= 0)")
    if (np.diff(logp, axis=1) > 0).any():
        raise ValueError("logp rows must be sorted descending (see topk_logprobs)")
    depth_max, k = logp.shape

    tokens, depth, parent, score = [root_token], [0], [-1], [np.float32(0.0)]
    ranks: list[tuple[int, ...]] = [()]
    index_of: dict[tuple[int, ...], int] = {(): 0}
    # heap entries: (-score, rank path, score as float32); Python compares the key tuple
    # lexicographically, which is exactly the total order of docs/ddtree.md.
    heap: list[tuple[float, tuple[int, ...], np.float32]] = []
    if budget > 0 and depth_max > 0 and k > 0:
        s0 = np.float32(logp[0, 0])
        heap.append((-float(s0), (0,), s0))
    while heap and len(tokens) - 1 < budget:
        _, path, s = heapq.heappop(heap)
        m = len(path)
        parent_path = path[:-1]
        index_of[path] = len(tokens)
        tokens.append(int(tok[m - 1, path[-1]]))
        depth.append(m)
        parent.append(index_of[parent_path])
        score.append(s)
        ranks.append(path)
        parent_score = score[index_of[parent_path]]
        if path[-1] + 1 < k:  # next sibling: same parent, next rank
            sib = np.float32(parent_score + logp[m - 1, path[-1] + 1])
            heapq.heappush(heap, (-float(sib), parent_path + (path[-1] + 1,), sib))
        if m < depth_max:  # first child: append rank 0
            child = np.float32(s + logp[m, 0])
            heapq.heappush(heap, (-float(child), path + (0,), child))
    return Tree(
        n=len(tokens) - 1,
        tokens=np.array(tokens, dtype=np.int64),
        depth=np.array(depth, dtype=np.int32),
        parent=np.array(parent, dtype=np.int32),
        score=np.array(score, dtype=np.float32),
        ranks=ranks,
    )
