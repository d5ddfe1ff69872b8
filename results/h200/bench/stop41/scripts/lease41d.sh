#!/usr/bin/env bash
# stop 41 lease 4: `kdtree bench all` at 87c5064, the search's wave cost 5 tiles for every kernel: stop 40's bench-all lease, unchanged.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
exec bash "$(dirname "$0")/../../stop40/scripts/lease40b.sh"
