#!/usr/bin/env bash
# scripts/engine_route.sh on the tiny model (16-token blocks, prompts of 255 tokens): two
# engine instances with private caches behind the conductor in live mode, a trace of three
# prompts repeated (route_trace.jsonl). cache_aware must route every repeat to the instance
# holding its prefix (tokens reused = every reusable prefix of the trace, more than
# least_loaded, no less than random), and every pass must give the no-store run's tokens and
# final logits.
set -euo pipefail
SRC=${MC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TRACE="$SRC/tests/engine/route_trace.jsonl" WINDOW=0 REQUESTS=8 TINY=1 BLOCK=16 \
  MAX_PROMPT=255 SEGMENT_MB=64 CHECK=1 \
  bash "$SRC/scripts/engine_route.sh" "${MC_BIN_DIR:-$SRC/build/bin}"
