#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the demo need.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libfabric-dev libfabric-bin libhwloc-dev libcriterion-dev
      procps util-linux iproute2 nftables gnuplot-nox
      openmpi-bin libopenmpi-dev
      clang libclang-rt-14-dev)  # the sanitizer build and its fuzzers (docs/fuzzing.md)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
