#!/usr/bin/env bash
# The Debian package (root): configure a packaging build with prefix /usr
# (no tests), make the man pages, `cpack -G DEB`, install the package with
# dpkg, then with no FI_ variable set (env -i): fi_info -p pmshm lists pmshm,
# fi_pingpong -p pmshm server and client both exit 0, the man pages, pmethd
# (--check of the installed configuration), its systemd unit and pmstat are
# in place; remove the package and check every file it installed is gone.
#   check_deb.sh <source dir>
# Exit 77 (skip) when not root, without dpkg, or when a pmfabric package or
# provider DSOs from elsewhere are already installed (they are not touched).
set -u
src=$(cd "$1" && pwd) || exit 1
((EUID == 0)) || { echo "SKIP: not root"; exit 77; }
command -v dpkg >/dev/null && command -v cpack >/dev/null || { echo "SKIP: no dpkg/cpack"; exit 77; }
provdir=$(pkg-config --variable=libdir libfabric)/libfabric
if dpkg-query -W pmfabric >/dev/null 2>&1; then echo "SKIP: a pmfabric package is installed"; exit 77; fi
if [[ -e $provdir/libpmshm-fi.so || -e $provdir/libpmeth-fi.so ]]; then
    echo "SKIP: provider DSOs already in $provdir (not from this test)"; exit 77
fi
work=$(mktemp -d /tmp/check_deb.XXXXXX) || exit 1
installed=0
cleanup() {
    ((installed)) && dpkg --purge pmfabric >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail=0
expect() {
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
t0=$SECONDS
cmake -S "$src" -B "$work/b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DPM_BUILD_TESTS=OFF \
    -DPM_BUILD_MPI=OFF -DPM_FUZZ=OFF >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/b" -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
(cd "$work/b" && cpack -G DEB) >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/b/pmfabric_*.deb 2>/dev/null | head -1)
expect "cpack made a package ($(basename "${deb:-none}"), $((SECONDS - t0)) s)" test -n "$deb"
[[ -n $deb ]] || exit 1
dpkg-deb -I "$deb" | sed -n 's/^ \(Package\|Version\|Depends\):/  \1:/p'
dpkg-deb -c "$deb" | awk '{ print "  " $6 }' | grep -v '/$'
dpkg -i "$deb" >"$work/dpkg.log" 2>&1
r=$?
installed=1
expect "dpkg -i (exit $r)" test "$r" -eq 0
((r == 0)) || cat "$work/dpkg.log"
clean_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root)
out=$("${clean_env[@]}" fi_info -p pmshm 2>&1)
expect "fi_info -p pmshm with no environment finds pmshm" grep -q "provider: pmshm" <<<"$out"
if command -v fi_pingpong >/dev/null; then
    port=$((20000 + RANDOM % 20000))
    "${clean_env[@]}" timeout 30 fi_pingpong -p pmshm -e rdm -B "$port" -I 100 >"$work/srv.log" 2>&1 &
    srv=$!
    sleep 0.5
    "${clean_env[@]}" timeout 30 fi_pingpong -p pmshm -e rdm -P "$port" -I 100 127.0.0.1 >"$work/cli.log" 2>&1
    rc_c=$?
    wait "$srv"
    rc_s=$?
    tail -2 "$work/cli.log"
    expect "fi_pingpong -p pmshm: server exit $rc_s, client exit $rc_c" test "$rc_s" -eq 0 -a "$rc_c" -eq 0
fi
for m in man7/fi_pmeth.7 man7/fi_pmshm.7 man8/pmethd.8 man1/pmstat.1; do
    expect "man page $m installed" test -e "/usr/share/man/$m.gz" -o -e "/usr/share/man/$m"
done
if command -v man >/dev/null; then
    expect "man -w fi_pmeth finds it" test -n "$(man -w fi_pmeth 2>/dev/null)"
fi
expect "pmethd --check reads the installed /etc/pmethd.conf" /usr/sbin/pmethd --check
expect "the systemd unit starts /usr/sbin/pmethd" grep -q "^ExecStart=/usr/sbin/pmethd -c /etc/pmethd.conf" \
    /usr/lib/systemd/system/pmethd.service
expect "/etc/pmethd.conf is a conffile" grep -q "/etc/pmethd.conf" <(dpkg-query --showformat='${Conffiles}' -W pmfabric)
expect "pmstat runs" /usr/bin/pmstat
files=$(dpkg -L pmfabric | while read -r f; do [[ -f $f ]] && echo "$f"; done)
dpkg --purge pmfabric >/dev/null 2>&1
r=$?
installed=0
expect "dpkg --purge (exit $r)" test "$r" -eq 0
left=$(for f in $files; do [[ -e $f ]] && echo "$f"; done)
expect "every installed file is gone ($left)" test -z "$left"
out=$("${clean_env[@]}" fi_info -p pmshm 2>&1)
expect "after removal fi_info no longer finds pmshm" test -z "$(grep 'provider: pmshm' <<<"$out")"
((fail == 0)) && echo "all checks passed"
exit $fail
