#!/usr/bin/env bash
# Installs the Debian 12 packages Mooncake-C needs to build, test, benchmark and demo.
# Idempotent: only missing packages are fetched; quick when everything is present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libprotobuf-c-dev protobuf-c-compiler
  libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev libxxhash-dev libcmocka-dev libhiredis-dev libssl-dev
  libucx-dev liburing-dev
  python3 python3-dev python3-pytest python3-numpy python3-setuptools python3-pip python3-wheel python3-torch
  etcd-server etcd-client prometheus memcached iperf3 redis-server redis-tools
  gnuplot-nox iproute2 procps curl fio
  chromium chromium-driver python3-selenium
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Packages must not leave daemons running: tests start their own servers on their own ports.
for svc in memcached redis-server etcd prometheus; do
  if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
done
