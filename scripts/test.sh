#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (as root): installs the
# packages, builds, runs ctest (unit tests; fabtests against pmshm and pmeth,
# pmeth also across network namespaces and under injected loss; Debian's
# fi_pingpong; packaging checks). Then the sanitizer build, build-san
# (docs/fuzzing.md): clang with AddressSanitizer and UndefinedBehaviorSanitizer,
# its unit tests, the functional suites on pmshm, pmeth and pmeth_eth, and
# the fuzzers' short runs with their reproducers. PM_SKIP_SAN=1 skips it.
# Arguments go to both ctest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON -DPM_FUZZ=OFF
cmake --build build -j"$(nproc)"
rc=0
(cd build && ctest --output-on-failure --timeout 180 -j"$(nproc)" "$@") || rc=$?
if [[ "${PM_SKIP_SAN:-0}" != 1 ]]; then
  # Without clang the sanitizers still run (gcc), the fuzzers are skipped.
  if command -v clang++ >/dev/null; then
    san_cc=(env CC=clang CXX=clang++)
  else
    san_cc=(env)
  fi
  "${san_cc[@]}" cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPM_BUILD_TESTS=ON \
    -DPM_SANITIZE=address,undefined
  cmake --build build-san -j"$(nproc)"
  # A report ends the process with a non-zero status: the test fails.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:allow_user_segv_handler=0:handle_sigbus=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  (cd build-san && ctest --output-on-failure --timeout 300 -j"$(nproc)" "$@") || rc=$?
fi
exit "$rc"
