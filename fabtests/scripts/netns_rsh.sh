#!/bin/sh
# Launcher for Open MPI's rsh PLM that enters a network namespace instead of
# logging in to a host: mpirun --mca plm_rsh_agent netns_rsh.sh with a
# hostfile whose host names are namespaces (mpibench.sh: pmmpia, pmmpib).
#
#   netns_rsh.sh HOST COMMAND...
#
# mpirun calls it as it would call ssh: the first argument is the host, the
# rest is one shell command line (orted and its options). It runs that line
# with /bin/sh inside namespace HOST. Only namespaces named by
# PM_NETNS_RSH_HOSTS (space separated; default "pmmpia pmmpib") are
# accepted, so a hostfile typo cannot start daemons in some other namespace.
# Every namespace gets its own temporary directory,
# ${PM_NETNS_RSH_TMP:-/tmp/pmmpi-rsh}/HOST, as TMPDIR: the namespaces share
# the file system and the host name, so without it both orteds would put
# their session directories (PMIx's shared-memory store, hwloc's topology
# segment) at the same paths and trip over each other. Needs root.
[ $# -ge 2 ] || { echo "usage: netns_rsh.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
case " ${PM_NETNS_RSH_HOSTS:-pmmpia pmmpib} " in
  *" $host "*) ;;
  *) echo "netns_rsh.sh: $host is not one of the benchmark's namespaces (${PM_NETNS_RSH_HOSTS:-pmmpia pmmpib})" >&2
     exit 2 ;;
esac
[ -e "/var/run/netns/$host" ] || { echo "netns_rsh.sh: no network namespace $host" >&2; exit 1; }
tmp=${PM_NETNS_RSH_TMP:-/tmp/pmmpi-rsh}/$host
mkdir -p "$tmp" || exit 1
TMPDIR=$tmp exec ip netns exec "$host" /bin/sh -c "$*"
