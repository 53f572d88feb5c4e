#!/usr/bin/env bash
# scripts/engine_pd.sh on the tiny model (16-token blocks; prompts of 200 tokens, with an 8-token
# tail, and 192, without): prefill and decode processes in separate network namespaces when
# this runs as root with `ip netns`, else on loopback (the script's first line says which);
# tokens and final logits bit-identical to colocated runs.
set -euo pipefail
SRC=${MC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PROMPTS="200 192" DECODE=8 SEGMENT=64MB ENGINE_FLAGS="--tiny --block 16" \
  bash "$SRC/scripts/engine_pd.sh" "${MC_BIN_DIR:-$SRC/build/bin}"
