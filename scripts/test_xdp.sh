#!/usr/bin/env bash
# Every pmeth suite on the AF_XDP wire (root): the functional suite and the
# 5 % loss suite across two network namespaces, with the XDP program in
# native (driver) mode and in SKB mode, each test checked by
# fabtests/scripts/check_wire.sh (an endpoint on af_xdp/<mode> moved frames
# both ways), plus xdp.cleanup.*. CI runs a representative subset of these
# (ctest -L xdp in the ordinary build); this is the whole set, in its own
# build directory build-xdp (about 7 minutes at -j2 on 2 loaded cores).
# Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-xdp -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON -DPM_FUZZ=OFF -DPM_XDP_FULL=ON
cmake --build build-xdp -j"$(nproc)"
cd build-xdp && ctest --output-on-failure --timeout 180 -j"$(nproc)" -L xdp "$@"
