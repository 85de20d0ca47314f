#!/usr/bin/env bash
# Runs several commands at the same time and judges them together, for
# ctest: tests that spend most of their time asleep (runfabtests.sh waits 1 s
# before each client) then share one ctest slot instead of holding one each.
#
#   run_together.sh CMD1 [ARGS...] :: CMD2 [ARGS...] [:: ...]
#
# Each command's output is kept apart and printed whole, one after the
# other, with its exit status, once all have ended. Exit: 0 when every
# command exited 0 or 77 (skipped) and at least one exited 0; 77 when all
# exited 77; 1 otherwise. On SIGTERM/SIGINT the commands get SIGTERM (each
# cleans up after itself) and are waited for.
set -u

cmds=()   # each entry: the command's words, NUL-separated
cur=()
for a in "$@"; do
    if [[ $a == "::" ]]; then
        ((${#cur[@]})) || { echo "run_together.sh: empty command" >&2; exit 2; }
        cmds+=("$(printf '%s\0' "${cur[@]}" | base64 -w0)")
        cur=()
    else
        cur+=("$a")
    fi
done
((${#cur[@]})) || { echo "usage: run_together.sh CMD [ARGS...] :: CMD [ARGS...] ..." >&2; exit 2; }
cmds+=("$(printf '%s\0' "${cur[@]}" | base64 -w0)")

work=$(mktemp -d /tmp/run_together.XXXXXX) || exit 1
pids=()
stop() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    wait
    rm -rf "$work"
    exit "$1"
}
trap 'stop 143' TERM HUP
trap 'stop 130' INT

for i in "${!cmds[@]}"; do
    mapfile -d '' -t words < <(base64 -d <<<"${cmds[$i]}")
    "${words[@]}" >"$work/$i.out" 2>&1 &
    pids+=($!)
    echo "run_together.sh: [$i] started (pid $!): ${words[*]}"
done

pass=0 skip=0 fail=0
rcs=()
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rcs[$i]=$?
done
for i in "${!pids[@]}"; do
    echo "===== [$i] exit ${rcs[$i]} ====="
    cat "$work/$i.out"
    case ${rcs[$i]} in
        0) pass=$((pass + 1)) ;;
        77) skip=$((skip + 1)) ;;
        *) fail=$((fail + 1)) ;;
    esac
done
rm -rf "$work"
echo "run_together.sh: $pass passed, $skip skipped, $fail failed"
((fail)) && exit 1
((pass)) || exit 77
exit 0
