// tree_accept, cache_compact and the whole chain on the SIMT emulator (CPU), against
// refs/tree_accept.kdtr, refs/compaction.kdtr and refs/ddtree_chain.kdtr.
#include "emu_runners.h"

using namespace kdtree;
using namespace kdtree::test;

KD_TEST(accept_cases) {
  const KdtrFile f(repo_path("refs/tree_accept.kdtr"));
  EmuAcceptRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) run_accept_case(runner, f, i);
}

KD_TEST(accept_batched_with_skipped_request) {
  const KdtrFile f(repo_path("refs/tree_accept.kdtr"));
  EmuAcceptRunner runner;
  run_accept_batch(runner, f);
}

KD_TEST(compaction_cases) {
  const KdtrFile f(repo_path("refs/compaction.kdtr"));
  EmuAcceptRunner runner;
  const int n = static_cast<int>(scalar(f, "num_cases"));
  for (int i = 0; i < n; ++i) {
    run_compact_case(runner, f, i, false);
    run_compact_case(runner, f, i, true);
  }
}

KD_TEST(chain_topk_build_verify_accept_compact) {
  const KdtrFile f(repo_path("refs/ddtree_chain.kdtr"));
  EmuAcceptRunner runner;
  run_chain_case(runner, f);
}

KD_TEST_MAIN()
