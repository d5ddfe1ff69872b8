// The reference best-first heap of the DDTree tree build (docs/ddtree.md, the
// algorithm of python_engine/ddtree/tree.py) in plain C++ for one CPU core: what a user
// would run on the host instead of tree_build, timed by bench_kernels next to the kernel
// and checked against it.
//
// Pop the best candidate (score desc, rank path asc), emit it, push its next sibling and
// its first child. Scores are float32 sums in depth order, as in the reference.
#pragma once

#include <cstdint>
#include <vector>

namespace kdtree::bench {

struct HeapTree {
  int n = 0;                    // nodes besides the root
  std::vector<int32_t> tokens;  // [n+1], tokens[0] = root token
  std::vector<int32_t> parent;  // [n+1], parent[0] = -1
  std::vector<int32_t> depth;   // [n+1]
};

class TreeHeap {
 public:
  // logp, tok: [D, K] row-major (rows sorted descending), one request.
  void build(const float* logp, const int32_t* tok, int D, int K, int budget, int32_t root_token, HeapTree* out) {
    out->tokens.assign(1, root_token);
    out->parent.assign(1, -1);
    out->depth.assign(1, 0);
    nodes_.clear();
    heap_.clear();
    nodes_.push_back(Node{0.0f, -1, 0, -1});
    if (budget > 0 && D > 0 && K > 0) push(Cand{logp[0], 0, 0});
    while (!heap_.empty() && static_cast<int>(nodes_.size()) - 1 < budget) {
      const Cand c = pop();
      const Node& par = nodes_[c.parent];
      const int d = par.depth + 1;
      nodes_.push_back(Node{c.score, c.parent, d, c.rank});
      const int id = static_cast<int>(nodes_.size()) - 1;
      out->tokens.push_back(tok[static_cast<int64_t>(d - 1) * K + c.rank]);
      out->parent.push_back(c.parent);
      out->depth.push_back(d);
      if (c.rank + 1 < K)  // next sibling: parent score + the next rank's logp
        push(Cand{nodes_[c.parent].score + logp[static_cast<int64_t>(d - 1) * K + c.rank + 1], c.parent, c.rank + 1});
      if (d < D) push(Cand{c.score + logp[static_cast<int64_t>(d) * K], id, 0});  // first child
    }
    out->n = static_cast<int>(nodes_.size()) - 1;
  }

 private:
  struct Node {
    float score;
    int parent, depth, rank;
  };
  struct Cand {
    float score;  // the path's float32 score
    int parent;   // node index of the parent
    int rank;     // rank at the last depth
  };

  // Whether a comes before b in the total order: score desc, then rank path ascending.
  bool before(const Cand& a, const Cand& b) const {
    if (a.score != b.score) return a.score > b.score;
    return path_less(a.parent, a.rank, b.parent, b.rank);
  }
  // Rank paths parent(a)+(ra) vs parent(b)+(rb), lexicographic (a prefix comes first).
  bool path_less(int pa, int ra, int pb, int rb) const {
    int da = nodes_[pa].depth + 1, db = nodes_[pb].depth + 1;
    // walk the deeper one up to the common depth, remembering the rank it had there
    int xa = ra, xb = rb;
    bool a_deeper = da > db, b_deeper = db > da;
    while (da > db) {
      xa = nodes_[pa].rank;
      pa = nodes_[pa].parent;
      --da;
    }
    while (db > da) {
      xb = nodes_[pb].rank;
      pb = nodes_[pb].parent;
      --db;
    }
    // both paths cut to the same depth: find the first differing rank from the top
    int first_a = xa, first_b = xb;
    while (pa != pb) {
      first_a = nodes_[pa].rank;
      first_b = nodes_[pb].rank;
      pa = nodes_[pa].parent;
      pb = nodes_[pb].parent;
    }
    if (first_a != first_b) return first_a < first_b;
    if (xa != xb) return xa < xb;
    return b_deeper && !a_deeper;  // equal up to the shorter length: the shorter (a) first
  }

  void push(const Cand& c) {
    heap_.push_back(c);
    size_t i = heap_.size() - 1;
    while (i > 0) {
      const size_t up = (i - 1) / 2;
      if (!before(heap_[i], heap_[up])) break;
      std::swap(heap_[i], heap_[up]);
      i = up;
    }
  }
  Cand pop() {
    const Cand top = heap_[0];
    heap_[0] = heap_.back();
    heap_.pop_back();
    size_t i = 0;
    while (true) {
      const size_t l = 2 * i + 1, r = l + 1;
      size_t best = i;
      if (l < heap_.size() && before(heap_[l], heap_[best])) best = l;
      if (r < heap_.size() && before(heap_[r], heap_[best])) best = r;
      if (best == i) break;
      std::swap(heap_[i], heap_[best]);
      i = best;
    }
    return top;
  }

  std::vector<Node> nodes_;
  std::vector<Cand> heap_;
};

}  // namespace kdtree::bench
