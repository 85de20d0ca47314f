#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the demo need.
# autoconf, automake, libtool, python3: libfabric's fabtests (upstream.*),
# libfabric 2.6 and Sandia OpenSHMEM (scripts/thirdparty.sh); mpich: its
# Hydra launcher (mpiexec.hydra) for SOS. Open MPI keeps the mpirun/mpicc
# alternatives (priority 50 against mpich's 40).
set -euo pipefail
pkgs=(cmake g++ make pkg-config libfabric-dev libfabric-bin libhwloc-dev libcriterion-dev
      procps util-linux iproute2 nftables gnuplot-nox
      openmpi-bin libopenmpi-dev
      autoconf automake libtool python3 mpich
      clang libclang-rt-14-dev   # the sanitizer build and its fuzzers (docs/fuzzing.md)
      libxdp-dev libbpf-dev      # pmeth's AF_XDP wire (its XDP program is compiled with clang -target bpf)
      libibverbs-dev             # pmeth's verbs raw-packet wire (built and unit-tested; no device here)
      pandoc dpkg-dev)           # man pages from docs/*.N.md; the Debian package (cpack, dpkg-shlibdeps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
