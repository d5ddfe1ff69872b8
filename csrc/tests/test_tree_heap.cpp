// The reference heap of csrc/bench/tree_heap.h (the CPU baseline `kdtree bench` times next
// to tree_build) against the Python reference's trees: refs/tree_build.kdtr's single cases
// and, when $KDTREE_TREE_FUZZ names one, a fuzz bundle of python_engine.refgen.tree_fuzz_cases.
// A baseline that built other trees would make the bench's comparison meaningless.
#include <cstdlib>
#include <string>

#include "bench/tree_heap.h"
#include "common/kernel_checks/kernel_test_util.h"

using namespace kdtree;
using namespace kdtree::test;

namespace {

void check_heap_case(const KdtrFile& f, int i) {
  const std::string c = "c" + std::to_string(i);
  const KdtrTensor& logp = tensor(f, c + ".logp", 2);
  const int D = static_cast<int>(logp.shape[0]), K = static_cast<int>(logp.shape[1]);
  const int budget = static_cast<int>(scalar(f, c + ".budget"));
  const int32_t root = static_cast<int32_t>(scalar(f, c + ".root"));
  bench::HeapTree tree;
  bench::TreeHeap heap;
  heap.build(logp.as<float>(), tensor(f, c + ".tok", 2).as<int32_t>(), D, K, budget, root, &tree);
  const int n = static_cast<int>(scalar(f, c + ".n"));
  KD_EXPECT_EQ(tree.n, n);
  if (tree.n != n) return;
  expect_equal_arrays(c + ".tokens", tree.tokens.data(), f.get(c + ".tokens").as<int32_t>(), n + 1);
  expect_equal_arrays(c + ".parent", tree.parent.data(), f.get(c + ".parent").as<int32_t>(), n + 1);
  expect_equal_arrays(c + ".depth", tree.depth.data(), f.get(c + ".depth").as<int32_t>(), n + 1);
}

}  // namespace

KD_TEST(heap_matches_committed_trees) {
  const KdtrFile f(repo_path("refs/tree_build.kdtr"));
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) check_heap_case(f, i);
}

KD_TEST(heap_matches_fuzz_trees) {
  const char* path = std::getenv("KDTREE_TREE_FUZZ");
  if (!path || !*path) KD_SKIP("set KDTREE_TREE_FUZZ to a bundle of python -m python_engine.refgen.tree_fuzz_cases");
  const KdtrFile f(path);
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) check_heap_case(f, i);
}

KD_TEST_MAIN()
