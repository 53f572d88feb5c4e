#!/usr/bin/env bash
# scripts/engine_failover.sh on the tiny model (16-token blocks, prompts of 255 tokens): a
# storage server killed with SIGKILL mid-replay; every request completes with the no-store
# run's tokens and final logits, and the requests after the kill recompute what they lost.
set -euo pipefail
SRC=${MC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
REQUESTS=12 PAUSE_AFTER=6 MAX_PROMPT=255 SEGMENT=64MB ENGINE_FLAGS="--tiny --block 16" \
  bash "$SRC/scripts/engine_failover.sh" "${MC_BIN_DIR:-$SRC/build/bin}"
