#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (as root): installs the
# packages, builds, runs ctest (unit tests; fabtests against pmshm and pmeth,
# pmeth also across network namespaces and under injected loss; Debian's
# fi_pingpong; packaging checks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure --timeout 180 -j"$(nproc)" "$@"
