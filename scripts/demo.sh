#!/usr/bin/env bash
# The main job: builds the providers, compares pmshm with libfabric's shm on
# this machine (ping-pong latency, bandwidth, message rate), then pmeth with
# tcp;ofi_rxm, udp;ofi_rxd and the raw AF_PACKET floor across two network
# namespaces (as root), printing the ratio tables and writing CSV under
# build/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON
cmake --build build -j"$(nproc)"
export FI_PROVIDER_PATH="$PWD/build/lib"
fabtests/scripts/bench_compare.sh --bin-dir build/fabtests --out build/demo/shm --quick "$@"
if [ "$(id -u)" = 0 ]; then
  fabtests/scripts/bench_eth.sh --bin-dir build/fabtests --out build/demo/eth --quick --mtus "1500 9000"
else
  echo "pmeth comparison skipped: network namespaces need root"
fi
