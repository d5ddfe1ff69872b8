#!/usr/bin/env bash
# tree_build's searches against each other in one lease (issue 13): the one-pass search (the
# default) and the sweep alone (KD_TREE_SEARCH=sweep), through scripts/kernel_variants_ab.sh:
# the GPU tree test with each, compute-sanitizer, the A/B table, phase clocks of the default.
# Usage (repository root, GPU machine):
#   OUT=/tmp/o [TREE_AB_ROUNDS=3] [TREE_AB_SANITIZERS="memcheck racecheck"] scripts/tree_search_ab.sh
exec env TREE_VARIANTS="onepass= sweep=@KD_TREE_SEARCH=sweep" TREE_CLK_VARIANTS="${TREE_CLK_VARIANTS-onepass}" \
  TREE_AB_SANITIZERS="${TREE_AB_SANITIZERS-memcheck racecheck}" "$(dirname "$0")/kernel_variants_ab.sh"
