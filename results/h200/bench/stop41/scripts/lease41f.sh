#!/usr/bin/env bash
# stop 41 lease 6: `kdtree bench all` at 7508c8f, config 10's second-wave check: stop 40's bench-all lease, unchanged.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
exec bash "$(dirname "$0")/../../stop40/scripts/lease40b.sh"
