#!/usr/bin/env bash
# The layer rule: a module may include only itself and the layers below it.
#   common <- te, rpc, disk <- master (te only for the embedded HTTP metadata server), client <- conductor
#   client <- engine (through the public store API, include/mooncake/store.h)
# (disk, the SSD tier's storage engine, is for the client: a storage server owns its disk)
# Everything may include include/mooncake/*.h (the public API).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() { # module allowed-regex
  local mod=$1 allowed=$2
  [ -d "src/$mod" ] || return 0
  while IFS= read -r line; do
    inc=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$line")
    if ! grep -qxE "$allowed" <<<"$inc"; then
      echo "layer violation: $line" >&2
      fail=1
    fi
  done < <(grep -rnE '#include "[a-z_]+/' "src/$mod" --include='*.[ch]' || true)
}
check common 'common|mooncake'
check te 'common|te|mooncake'
check rpc 'common|rpc|mooncake'
check disk 'common|disk|mooncake'
check master 'common|rpc|te|master|mooncake'
check client 'common|rpc|te|disk|client|mooncake'
check conductor 'common|rpc|conductor|mooncake'
check engine 'common|engine|mooncake'
if [ $fail -ne 0 ]; then exit 1; fi
echo "layers: ok"
