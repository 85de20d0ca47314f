#!/usr/bin/env bash
# pmstat(1) against live endpoints (tests/cluster_xfer -H keeps them open):
#   pmstat_test.sh <build dir> live|stale|pidns|reap|malformed
# live: pmeth over Ethernet frames on lo (host ids 1, 2) and pmshm, 2 ranks
#   each, 20 messages of 4096 B in a ring; while the endpoints are held open
#   pmstat lists both pids as live and its counters show at least the bytes
#   sent (pmeth: eth.rail0.tx_bytes, one peer with fields; pmshm:
#   shm.tx_pkts); after the processes exit their pages are gone.
# stale: a rank killed by SIGKILL leaves its page: pmstat says "stale",
#   pmstat --clean removes it.
# pidns: ranks in a PID namespace of their own open endpoints (and reap
#   stale pages) while two ranks out here hold theirs: those pages stay, live.
# malformed: truncated, wrong magic, wrong layout size, a foreign uid and
#   absurd counts in a directory of copies: pmstat lists them as invalid
#   (or bounds the counts) and exits 0; -p of a missing pid exits 1.
# reap: which files of the pages' pattern a process's first endpoint
#   removes from /dev/shm (orphaned pages, old hidden ones) and which it
#   keeps (a hidden one being made, a locked one, another user's, one with
#   two links, a symlink).
set -u
# Where permitted, in a /dev/shm of its own (a private mount namespace):
# another test's process opening its first endpoint meanwhile would reap
# the pages this test leaves stale on purpose, or remove what only the
# ranks here should.
if [[ -z ${PMSTAT_TEST_PRIVATE:-} ]] && unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private env PMSTAT_TEST_PRIVATE=1 bash -c \
        'mount -t tmpfs -o mode=1777 pmstat_test /dev/shm && exec "$0" "$@"' "$0" "$@"
fi
build=$(cd "$1" && pwd) || exit 1
what=$2
pmstat=$build/pmstat
xfer=$build/tests/cluster_xfer
work=$(mktemp -d /tmp/pmstat_test.XXXXXX) || exit 1
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do rm -f /dev/shm/pmstat-*-"$p"-*; done
    rm -rf "$work"
}
trap cleanup EXIT
fail=0
expect() {
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
# start <prov> <hold s> <dir>: two ranks, 20 x 4096 B ring; waits until both hold
start() {
    local prov=$1 hold=$2 dir=$3
    mkdir -p "$dir"
    pids=()
    for r in 0 1; do
        FI_PROVIDER_PATH="$build/lib" FI_PMETH_IFACE=lo FI_PMETH_HOST_ID=$((r + 1)) \
            "$xfer" -p "$prov" -r "$r" -n 2 -d "$dir" -t ring -i 20 -s 4096 -H "$hold" -T 60 >"$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 200); do
        [[ -e $dir/held.0 && -e $dir/held.1 ]] && { sleep 0.3; return 0; }  # > one 100 ms update
        sleep 0.05
    done
    echo "FAIL: the ranks did not reach the hold"; cat "$dir"/rank*.log
    exit 1
}
counter() {  # <pmstat -c output> <name>
    awk -v n="$2" '$1 == n { print $2; exit }' <<<"$1"
}

case $what in
live)
    for prov in pmeth pmshm; do
        start "$prov" 3 "$work/$prov"
        list=$("$pmstat")
        echo "$list"
        for p in "${pids[@]}"; do
            expect "$prov: pid $p listed live" grep -Eq "^$p +$prov +live " <<<"$list"
        done
        out=$("$pmstat" -P -p "${pids[0]}")
        r=$?
        expect "$prov: pmstat -P -p ${pids[0]} (exit $r)" test "$r" -eq 0
        if [[ $prov == pmeth ]]; then
            b=$(counter "$out" eth.rail0.tx_bytes)
            expect "pmeth: eth.rail0.tx_bytes=$b >= 20 x 4096" test "${b:-0}" -ge 81920
            expect "pmeth: the wire is af_packet" grep -q " af_packet " <<<"$("$pmstat" | grep "^${pids[0]} ")"
            expect "pmeth: one peer shown, with its counters" \
                grep -Eq "^  peer pmeth://.*tx_frames=[1-9][0-9]* .*retrans=[0-9]+" <<<"$out"
            expect "pmeth: no peer through shared memory (host ids differ)" test "$(counter "$out" composite.shm_peers)" = 0
        else
            n=$(counter "$out" shm.tx_pkts)
            expect "pmshm: shm.tx_pkts=$n >= 20" test "${n:-0}" -ge 20
        fi
        for i in 0 1; do
            wait "${pids[$i]}"
            r=$?
            expect "$prov: rank $i exit $r" test "$r" -eq 0
        done
        left=$(for p in "${pids[@]}"; do ls /dev/shm/pmstat-*-"$p"-* 2>/dev/null; done)
        expect "$prov: no page left after close ($left)" test -z "$left"
    done
    ;;
stale)
    start pmeth 20 "$work/stale"
    kill -9 "${pids[1]}"
    wait "${pids[1]}" 2>/dev/null
    list=$("$pmstat")
    echo "$list"
    expect "the killed rank's page is listed stale" grep -Eq "^${pids[1]} +pmeth +stale " <<<"$list"
    expect "the other rank is live" grep -Eq "^${pids[0]} +pmeth +live " <<<"$list"
    "$pmstat" --clean
    expect "pmstat --clean removed the stale page" test -z "$(ls /dev/shm/pmstat-*-"${pids[1]}"-* 2>/dev/null)"
    expect "... and kept the live one" test -n "$(ls /dev/shm/pmstat-*-"${pids[0]}"-* 2>/dev/null)"
    ;;
pidns)
    # Two ranks in a PID namespace of their own (runfabtests runs in one)
    # open their first endpoints, which reaps stale pages: the pages of the
    # live ranks out here stay (the reaper once judged them by pid, and no
    # pid of this namespace is seen from that one).
    unshare --pid --fork --mount-proc true 2>/dev/null || { echo "SKIP: cannot make a PID namespace"; exit 77; }
    start pmeth 8 "$work/live"
    pages() { ls /dev/shm/pmstat-*-"${pids[0]}"-* /dev/shm/pmstat-*-"${pids[1]}"-* 2>/dev/null | wc -l; }
    before=$(pages)
    mkdir -p "$work/ns"
    FI_PROVIDER_PATH="$build/lib" unshare --pid --fork --mount-proc bash -c '
        for r in 0 1; do "$0" -p pmshm -r $r -n 2 -d "$1" -t ring -i 2 -s 64 -T 30 >"$1/rank$r.log" 2>&1 & p[r]=$!; done
        wait ${p[0]}; a=$?; wait ${p[1]}; b=$?
        echo "ranks in the PID namespace: exit $a, $b"; ((a == 0 && b == 0))' "$xfer" "$work/ns"
    r=$?
    expect "the ranks in the PID namespace ran (exit $r)" test "$r" -eq 0
    ((r == 0)) || cat "$work/ns"/rank*.log
    after=$(pages)
    expect "the live ranks' pages are all still there ($before before, $after after)" \
        test "$before" -ge 2 -a "$after" -eq "$before"
    list=$("$pmstat")
    for p in "${pids[@]}"; do
        expect "pid $p still listed live" grep -Eq "^$p +pmeth +live " <<<"$list"
    done
    for i in 0 1; do
        wait "${pids[$i]}"
        r=$?
        expect "rank $i exit $r" test "$r" -eq 0
    done
    ;;
reap)
    # What a process's first endpoint reaps in /dev/shm, among names of this
    # user's pattern (pid 0: no process has it): a page nobody holds the
    # lock of, and a hidden one (its process died between making and
    # renaming it) older than a minute. What it keeps: a hidden one just
    # made (being made: no lock yet), one whose lock a process holds, one of
    # another user, one with a second link, a symlink (and its target).
    u=$(id -u) d=/dev/shm
    f=$d/pmstat-$u-0-$$
    extra=("$d/pmfabric-test-link-$$" "$work/target")
    trap 'cleanup; rm -f "$f"-* "$d/.pmstat-$u-0-$$"-* "${extra[@]}"' EXIT
    : >"$f-stale"
    : >"$d/.pmstat-$u-0-$$-old"
    touch -d '-5 min' "$d/.pmstat-$u-0-$$-old"
    : >"$d/.pmstat-$u-0-$$-new"
    : >"$f-locked"
    exec {lock}<"$f-locked"
    flock -s "$lock" || { echo "FAIL: cannot lock $f-locked"; exit 1; }  # held by this shell
    : >"$f-foreign"
    foreign=0
    chown nobody "$f-foreign" 2>/dev/null && foreign=1
    : >"$f-linked"
    ln "$f-linked" "$d/pmfabric-test-link-$$"
    echo target >"$work/target"
    ln -s "$work/target" "$f-symlink"
    mkdir -p "$work/r"
    rp=()
    for r in 0 1; do
        FI_PROVIDER_PATH="$build/lib" "$xfer" -p pmshm -r $r -n 2 -d "$work/r" -t ring -i 2 -s 64 -T 30 \
            >"$work/r/rank$r.log" 2>&1 &
        rp+=($!)
    done
    for i in 0 1; do
        wait "${rp[$i]}"
        r=$?
        expect "rank $i exit $r" test "$r" -eq 0
        ((r == 0)) || cat "$work/r/rank$i.log"
    done
    expect "the unlocked page was removed" test ! -e "$f-stale"
    expect "the hidden page of 5 minutes ago was removed" test ! -e "$d/.pmstat-$u-0-$$-old"
    expect "the hidden page just made was kept" test -e "$d/.pmstat-$u-0-$$-new"
    expect "the page whose lock is held was kept" test -e "$f-locked"
    ((foreign)) && expect "the page of another user was kept" test -e "$f-foreign"
    expect "the page with two links was kept" test -e "$f-linked"
    expect "the symlink was kept" test -L "$f-symlink"
    expect "... and its target" test "$(cat "$work/target")" = target
    ;;
malformed)
    start pmshm 3 "$work/src"
    page=$(ls /dev/shm/pmstat-*-"${pids[0]}"-* | head -1)
    d=$work/pages
    mkdir -p "$d"
    cp "$page" "$d/pmstat-0-1-good"
    head -c 10 "$page" >"$d/pmstat-0-1-truncated"
    head -c 300 "$page" >"$d/pmstat-0-1-short"
    cp "$page" "$d/pmstat-0-1-magic"; printf 'XXXX' | dd of="$d/pmstat-0-1-magic" bs=1 seek=0 conv=notrunc 2>/dev/null
    cp "$page" "$d/pmstat-0-1-size"; printf '\x01\x00\x00\x00' | dd of="$d/pmstat-0-1-size" bs=1 seek=8 conv=notrunc 2>/dev/null
    cp "$page" "$d/pmstat-0-1-counts"
    printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$d/pmstat-0-1-counts" bs=1 seek=264 conv=notrunc 2>/dev/null
    head -c 75544 /dev/urandom >"$d/pmstat-0-1-random"
    cp "$page" "$d/pmstat-0-1-foreign"; chown nobody "$d/pmstat-0-1-foreign" 2>/dev/null
    ln -s "$page" "$d/pmstat-0-1-symlink"
    out=$("$pmstat" -d "$d" 2>&1)
    r=$?
    echo "$out"
    expect "pmstat over malformed pages exits 0 ($r)" test "$r" -eq 0
    for f in truncated short magic size random symlink; do
        expect "$f: listed invalid" grep -q "invalid.*pmstat-0-1-$f" <<<"$out"
    done
    if [[ $(stat -c %U "$d/pmstat-0-1-foreign") == nobody ]]; then
        expect "foreign owner: listed invalid" grep -q "invalid.*pmstat-0-1-foreign.*belongs to uid" <<<"$out"
    fi
    out=$("$pmstat" -P -d "$d" 2>&1)
    r=$?
    expect "pmstat -P over them exits 0 ($r)" test "$r" -eq 0
    n=$(grep -c '^  [a-z]' <<<"$out")
    expect "absurd counts are bounded ($n counter lines)" test "$n" -le $((2 * (128 + 64 * 1) + 20))
    "$pmstat" -p 999999999 -d "$d" >/dev/null 2>&1
    r=$?
    expect "pmstat -p of a missing pid exits 1 ($r)" test "$r" -eq 1
    ;;
*)
    echo "usage: $0 <build dir> live|stale|pidns|reap|malformed" >&2
    exit 2
    ;;
esac
((fail == 0)) && echo "all checks passed"
exit $fail
