#!/usr/bin/env bash
# pmbench in a very reduced mode (two sizes, one repetition, one host):
# it must finish, write CSV with values, and draw the plots. A pmeth label
# whose ranks share a host id (FT_HOSTID empty: the machine's own) goes
# through shared memory: pmbench must refuse its figures (NA, with the
# reason), not report them as Ethernet's.
#   check_pmbench.sh <fabtests binary dir> <provider dir>
# Exit 77 (skipped) without root (pmeth needs CAP_NET_RAW) or gnuplot.
set -u
bin_dir="$1" prov_dir="$2"
src="$(cd "$(dirname "$0")/.." && pwd)"
((EUID == 0)) || { echo "SKIP: needs root (pmeth on lo needs CAP_NET_RAW)"; exit 77; }
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not installed (scripts/install-deps.sh)"; exit 77; }
out="$(mktemp -d "${TMPDIR:-/tmp}/pmbench_test.XXXXXX")"
trap 'rm -rf "$out"' EXIT
# bounded below ctest's TIMEOUT 120, so that pmbench's own clean-up runs
timeout -k 5 100 "$src/fabtests/scripts/pmbench" --sizes 8,65536 --reps 1 --only-host --timeout 20 \
    --lo-provs "pmeth tcp;ofi_rxm udp;ofi_rxd pmeth_onehost:pmeth:FT_HOSTID=" \
    --bin-dir "$bin_dir" --provider-path "$prov_dir" --out "$out"
st=$?
((st == 0)) || { echo "FAIL: pmbench exit status $st"; exit 1; }
rc=0
for f in raw.csv median.csv shm_lat.png shm_bw.png lo_lat.png; do
    [[ -s "$out/$f" ]] || { echo "FAIL: $f missing or empty"; rc=1; }
done
head -c 8 "$out/shm_lat.png" | od -An -tx1 | grep -q "89 50 4e 47" || { echo "FAIL: shm_lat.png is not a PNG"; rc=1; }
rows=$(($(wc -l <"$out/median.csv") - 1))
vals=$(awk -F, 'NR > 1 && $7 != "NA"' "$out/median.csv" | wc -l)
echo "median.csv: $vals of $rows measurements have a value"
((rows >= 20)) || { echo "FAIL: expected at least 20 measurements"; rc=1; }
((vals * 2 >= rows)) || { echo "FAIL: most values are NA"; cat "$out/notes.txt"; rc=1; }
# the base providers themselves must have produced numbers
for l in shm,pmshm lo,pmeth; do
    grep -q "^$l,.*,pingpong,8,lat_us,[0-9]" "$out/median.csv" || { echo "FAIL: no ${l#*,} ping-pong value"; rc=1; }
done
grep -q "^lo,pmeth_onehost,.*,lat_us,NA," "$out/median.csv" ||
    { echo "FAIL: pmeth with one host id on both ranks was measured as if over Ethernet"; rc=1; }
grep -q "lo pmeth_onehost: .*did not go over the wire" "$out/notes.txt" ||
    { echo "FAIL: notes.txt does not say why pmeth_onehost has no values"; rc=1; }
exit $rc
