#!/usr/bin/env bash
# Runs libfabric's own test suite (fabtests 1.17.0's runfabtests.sh, built by
# scripts/build_upstream_fabtests.sh) against pmshm or pmeth, unchanged, and
# judges its summary. docs/upstream_fabtests.md explains the settings.
#
#   run_upstream_fabtests.sh --bin DIR --prov pmshm|pmeth --mode local|netns
#       [--oob] [--tests SET] [--exclude FILE]... [--ubertest FILE]
#       [--prefix P] [--timeout S] [--work DIR]
#
#   --bin DIR       fabtests' installed programs (DIR/runfabtests.sh, DIR/fi_*)
#   --mode local    both sides on this host, same host id: pmshm, or pmeth with
#                   FI_PMETH_IFACE=lo (its composite device: shared memory)
#   --mode netns    pmeth only: server and client in two network namespaces
#                   <P>a/<P>b joined by a veth pair (192.0.2.1/24, 192.0.2.2/24),
#                   each its own FI_PMETH_HOST_ID, so every frame is real
#                   Ethernet and addresses resolve through ARP. runfabtests
#                   reaches the "hosts" through an ssh stand-in that runs the
#                   command in the namespace (nothing leaves this machine).
#   --oob           runfabtests -b: addresses swapped out of band (fabtests -E)
#                   instead of fi_getinfo's node/service (the default)
#   --tests SET     runfabtests -t (default "unit,functional,short" = quick)
#   --exclude FILE  lines "<regex>  # reason" (a reason is required); the
#                   regexes go to runfabtests -e. May be repeated.
#   --ubertest FILE the fi_ubertest configuration for -t complex
#   --timeout S     runfabtests -T: bound on each program (default 60)
#   --limit S       bound on the whole run (default 1100), so that the
#                   namespaces are removed before a ctest TIMEOUT could strike
#
# runfabtests.sh ends every fi_* process of the host in its cleanup, so it
# runs in a private PID namespace (unshare --pid --fork --mount-proc): its
# cleanup then sees only its own programs. Namespaces and veths are removed
# on every exit path. Prints "<n> passed, <n> failed, <n> excluded, <n> notrun"
# and every failing test; exits 0 only when no test that is not excluded
# failed and at least one passed; 77 (skipped) without the privileges.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin="" prov="" mode=local oob=0 tests="unit,functional,short" ubertest="" prefix="" timeout=60 limit=1100 work=""
excludes=()
while (($#)); do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --prov) prov=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --oob) oob=1; shift ;;
    --tests) tests=$2; shift 2 ;;
    --exclude) excludes+=("$2"); shift 2 ;;
    --ubertest) ubertest=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run_upstream_fabtests.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "run_upstream_fabtests.sh: $*" >&2; exit 1; }
[[ -x $bin/runfabtests.sh ]] || die "no runfabtests.sh in '$bin' (scripts/build_upstream_fabtests.sh builds it)"
bin=$(cd "$bin" && pwd)
[[ $prov == pmshm || $prov == pmeth ]] || die "--prov pmshm|pmeth"
[[ $mode == local || ($mode == netns && $prov == pmeth) ]] || die "--mode local, or netns for pmeth"
[[ -n ${FI_PROVIDER_PATH:-} ]] || die "FI_PROVIDER_PATH must name the directory of the provider DSOs"
[[ $timeout =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] || die "bad --timeout or --limit"
[[ -n $work ]] || work=$(mktemp -d /tmp/pmuft.XXXXXX)
mkdir -p "$work" || die "cannot create $work"

# Exclusions: every line a regex and a reason.
patterns=""
for f in "${excludes[@]}"; do
  [[ -f $f ]] || die "no exclude file $f"
  n=0
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
    [[ $line == *"#"* ]] || die "$f:$n: exclusion without a reason: $line"
    pat=${line%%#*}
    pat=$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$pat")
    [[ -n $pat ]] || continue
    [[ $pat != *,* ]] || die "$f:$n: a pattern may not contain a comma (runfabtests -e splits on commas)"
    patterns+=${patterns:+,}$pat
  done <"$f"
done

args=(-v -T "$timeout" -t "$tests")
((oob)) && args+=(-b)
[[ -n $patterns ]] && args+=(-e "$patterns")
[[ -n $ubertest ]] && args+=(-u "$ubertest")

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  # Stopped by a signal: the run (timeout passes the signal on) and tail,
  # also when the signal came before run_pid was set.
  local j
  for j in $(jobs -p); do kill -TERM "$j" 2>/dev/null; done
  wait 2>/dev/null
  [[ $mode == netns && -n $prefix ]] && "$here/netns.sh" down "$prefix" >/dev/null 2>&1
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

export FI_PROVIDER="$prov"
hosts=()
if [[ $mode == netns ]]; then
  [[ $prefix =~ ^[a-z0-9]{1,13}$ ]] || die "--mode netns needs --prefix (1..13 of [a-z0-9])"
  "$here/netns.sh" up "$prefix"
  rc=$?
  ((rc == 0)) || exit $rc
  "$here/netns.sh" addr "$prefix" || exit 1
  # The ssh stand-in: "ssh [-n] [-o opt]... HOST CMD" runs CMD in HOST's
  # namespace with that side's interface and host id.
  mkdir -p "$work/shim"
  cat >"$work/shim/ssh" <<EOF
#!/usr/bin/env bash
while ((\$#)); do case \$1 in -n) shift ;; -o) shift 2 ;; *) break ;; esac; done
host=\$1; shift
case \$host in
  ${prefix}a) iface=${prefix}va hid=a1 ;;
  ${prefix}b) iface=${prefix}vb hid=b2 ;;
  *) echo "ssh stand-in: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$host" env FI_PMETH_IFACE=\$iface FI_PMETH_HOST_ID=\$hid bash -c "\$*"
EOF
  chmod +x "$work/shim/ssh"
  export PATH="$work/shim:$PATH"
  args+=(-s 192.0.2.1 -c 192.0.2.2)
  hosts=("${prefix}a" "${prefix}b")
elif [[ $prov == pmeth ]]; then
  export FI_PMETH_IFACE=lo
fi

log=$work/runfabtests.log
echo "runfabtests.sh ${args[*]} $prov ${hosts[*]}  (in $work; log $log)"
cd "$work" || exit 1
# A private PID namespace: runfabtests' cleanup kills every fi_* process it
# can see. The namespace's first process is bash; when it ends, the kernel
# ends everything left in the namespace.
if ! unshare --pid --fork --mount-proc true 2>/dev/null; then
  echo "SKIP: cannot create a PID namespace here (needs root / CAP_SYS_ADMIN)" >&2
  exit 77
fi
# In the background, waited for: a signal to this script is handled at once
# (bash runs traps only after a foreground command ends). The output is
# followed from the log as it grows.
: >"$log"
timeout -k 10 "$limit" unshare --pid --fork --mount-proc --kill-child \
  bash -c '"$@" 2>&1' bash "$bin/runfabtests.sh" -p "$bin" "${args[@]}" "$prov" "${hosts[@]}" >"$log" 2>&1 &
run_pid=$!
tail -s 0.2 -n +1 -f --pid="$run_pid" "$log" &
tail_pid=$!
wait "$run_pid"
rc=$?
wait "$tail_pid"
((rc == 124 || rc == 137)) && echo "run_upstream_fabtests.sh: runfabtests.sh stopped after ${limit}s" >&2

# Verdicts: with -v runfabtests prints YAML, "- name: <test>" then
# "  result: <Pass|Fail|Notrun|Excluded...>".
summary=$(awk '
  /^- name: / { sub(/^- name: +/, ""); name = $0; next }
  /^  result: / { r = $2; sub(/^  result: +/, "");
                  if (r ~ /^Pass/) p++; else if (r ~ /^Fail/) { f++; failed = failed "\n  FAIL " name " (" $0 ")" }
                  else if (r ~ /^Excluded/) e++; else n++ }
  END { printf "%d %d %d %d%s", p, f, e, n, failed }' "$log")
read -r pass fail excl notrun <<<"$(head -1 <<<"$summary")"
mode_name=$mode
((oob)) && mode_name+=" -b" || mode_name+=" node/service"
echo "upstream fabtests $prov ($mode_name, -t $tests): $pass passed, $fail failed, $excl excluded, $notrun notrun"
tail -n +2 <<<"$summary"
((fail == 0 && pass > 0 && rc != 124 && rc != 137))
