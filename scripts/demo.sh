#!/usr/bin/env bash
# The main job: builds the providers, then runs `pmbench --quick`
# (docs/benchmarks.md): pmshm against libfabric's shm on this machine, pmeth
# against tcp;ofi_rxm and udp;ofi_rxd over lo, and (as root) pmeth against
# tcp;ofi_rxm, udp;ofi_rxd, net and the raw AF_PACKET floor across two
# network namespaces joined by a veth pair at MTU 1500 and 9000, pmeth on its
# default wire (AF_PACKET) and on AF_XDP (pmeth_xdp) in the same run. Prints the
# ratio tables and writes CSV and PNG plots under build/demo/. Extra
# arguments go to pmbench (e.g. --only-host, --mtus 1500).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON
cmake --build build -j"$(nproc)"
export FI_PROVIDER_PATH="$PWD/build/lib"
if [ "$(id -u)" != 0 ]; then
  echo "demo: not root: pmeth needs CAP_NET_RAW and the namespaces need root; their values will be NA or skipped"
fi
fabtests/scripts/pmbench --quick --bin-dir build/fabtests --out build/demo --mtus 1500,9000 \
  --ns-provs "pmeth pmeth_xdp:pmeth:FI_PMETH_WIRE=af_xdp tcp;ofi_rxm udp;ofi_rxd net" "$@"
