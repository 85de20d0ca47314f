#!/usr/bin/env bash
# One Sandia OpenSHMEM PE under Hydra (run_sos.sh puts it in TEST_RUNNER):
#   mpiexec.hydra -np N sos_pe.sh <test program> [args...]
# SOS_PE_HOST_IDS=h0,h1,...: PE i (Hydra's PMI_RANK) gets FI_PMETH_HOST_ID=h<i>
#   (PEs past the end of the list get its last entry), so that PEs on one
#   machine reach each other through pmeth's Ethernet frames rather than its
#   shared memory.
# SOS_PE_TIMEOUT=S: the PE is ended after S seconds (SIGTERM, SIGKILL 5 s
#   later), whatever Hydra does.
set -u
if [[ -n "${SOS_PE_HOST_IDS:-}" ]]; then
  IFS=, read -r -a ids <<<"$SOS_PE_HOST_IDS"
  rank=${PMI_RANK:?sos_pe.sh: PMI_RANK is not set (not started by Hydra?)}
  ((rank < ${#ids[@]})) || rank=$((${#ids[@]} - 1))
  export FI_PMETH_HOST_ID=${ids[$rank]}
fi
exec timeout -k 5 "${SOS_PE_TIMEOUT:-60}" "$@"
