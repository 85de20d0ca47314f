#!/usr/bin/env bash
# The main job: builds the providers and compares pmshm with libfabric's shm
# on this machine (ping-pong latency, bandwidth, message rate), printing the
# ratio table and writing CSV under build/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON
cmake --build build -j"$(nproc)"
export FI_PROVIDER_PATH="$PWD/build/lib"
fabtests/scripts/bench_compare.sh --bin build/fabtests --out build/demo "$@"
