#!/usr/bin/env bash
# Runs one libFuzzer harness of the sanitizer build (docs/fuzzing.md) and
# prints how many inputs it executed, how fast, and for how long.
#
#   scripts/fuzz.sh [-b BUILD] [-t SECONDS] [-r RUNS] [-j JOBS] [-k] HARNESS [libFuzzer flags...]
#
#   HARNESS      eth (pmeth endpoint over the loopback wire) or shm (pmshm endpoint's queue)
#   -b BUILD     the sanitizer build directory (default build-san)
#   -t SECONDS   fuzzing time (default 60); the run also stops after RUNS inputs
#   -r RUNS      most inputs to execute (default 50000000)
#   -j JOBS      parallel fuzzing processes (libFuzzer -fork=JOBS; default 1)
#   -k           keep going after a crash (with -j: collect every crash found)
#   --seeds      write the seed corpus fuzz/corpus/HARNESS anew (the harness
#                generates it) and exit
#   --check-seeds  have the harness write its seeds into a temporary directory
#                and compare them with fuzz/corpus/HARNESS: exit 1, naming the
#                files, when the stored corpus is not what the code generates
#                (a wire or format change left it stale)
#
# Reads the seeds of fuzz/corpus/HARNESS (never writes there); new inputs go
# to BUILD/fuzz/corpus-HARNESS, crashes to BUILD/fuzz/artifacts-HARNESS/.
# Exit status: 0 when nothing was found, otherwise libFuzzer's (non-zero).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-san"
secs=60
runs=50000000
jobs=1
keep=0
seeds_only=0
check_seeds=0
while (($#)); do
  case "$1" in
  -b) build="$2"; shift 2 ;;
  -t) secs="$2"; shift 2 ;;
  -r) runs="$2"; shift 2 ;;
  -j) jobs="$2"; shift 2 ;;
  -k) keep=1; shift ;;
  --seeds) seeds_only=1; shift ;;
  --check-seeds) check_seeds=1; shift ;;
  -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
  -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
(($#)) || { echo "usage: fuzz.sh [-b BUILD] [-t SECONDS] [-r RUNS] [-j JOBS] [-k] eth|shm [flags...]" >&2; exit 2; }
h="$1"
shift
bin="$build/fuzz/fuzz_$h"
[[ -x "$bin" ]] || { echo "fuzz.sh: no $bin (configure a sanitizer build with clang: docs/fuzzing.md)" >&2; exit 2; }
seeds="$root/fuzz/corpus/$h"

if ((check_seeds)); then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  PM_FUZZ_WRITE_SEEDS="$tmp/seeds" "$bin" >/dev/null
  if ! diff -rq "$tmp/seeds" "$seeds"; then
    echo "fuzz.sh: fuzz/corpus/$h is not what fuzz_$h generates: run scripts/fuzz.sh --seeds $h" >&2
    exit 1
  fi
  echo "fuzz.sh: fuzz/corpus/$h: $(ls "$seeds" | wc -l) seeds, as fuzz_$h generates them"
  exit 0
fi
if ((seeds_only)); then
  rm -rf "$seeds"
  PM_FUZZ_WRITE_SEEDS="$seeds" "$bin"
  exit 0
fi

work="$build/fuzz/corpus-$h"
art="$build/fuzz/artifacts-$h"
mkdir -p "$work" "$art"
log="$build/fuzz/fuzz-$h.log"
args=(-max_total_time="$secs" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$art/")
if ((jobs > 1 || keep)); then
  args+=(-fork="$jobs")
  ((keep)) && args+=(-ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
# Leaks and UBSan reports are failures; ASan already stops at the first report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
echo "fuzz.sh: $bin ${args[*]} $* $work $seeds"
start=$(date +%s.%N)
set +e
"$bin" "${args[@]}" "$@" "$work" "$seeds" 2>&1 | tee "$log" | grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' 
rc=${PIPESTATUS[0]}
set -e
end=$(date +%s.%N)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [[ -z "$execs" ]]; then  # fork mode prints no final stats: the last status line
  execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
fi
execs=${execs:-0}
corpus=$(find "$work" -type f | wc -l)
awk -v h="$h" -v n="$execs" -v s="$start" -v e="$end" -v c="$corpus" -v rc="$rc" 'BEGIN {
  t = e - s; printf "fuzz.sh: %s: %d executions in %.1f s (%.0f exec/s), corpus %d inputs, exit %d\n",
  h, n, t, (t > 0 ? n / t : 0), c, rc }'
if ((rc != 0)); then
  echo "fuzz.sh: $h found a problem; reproducer(s):"
  ls -1 "$art" | sed "s|^|  $art/|"
  echo "fuzz.sh: replay one with: $bin <file>"
fi
exit "$rc"
