# Shared pieces of the benchmark scripts (sourced by pmbench; bench_compare.sh
# and bench_eth.sh are thin wrappers around pmbench). Every run of a program
# is bounded, repeated, and its median kept; results go to two CSV files.
#
#   bench_init OUT_DIR REPS TIMEOUT  creates OUT_DIR/{raw,median}.csv, notes.txt, stderr.log
#   bench_run SECS OUT_FILE -- cmd   one bounded run (timeout -k 5), stdout to OUT_FILE,
#                                    stderr to OUT_DIR/last.err; returns its status
#   measure SETTING LABEL PROVIDER TEST SIZE METRIC MATCH -- cmd...
#                                    REPS runs, value of METRIC from the result line that
#                                    contains MATCH; one progress line "[i/n] ..."
#   measure_once SETTING LABEL PROVIDER TEST SIZE METRIC MATCH REP -- cmd...
#                                    one of those runs (sets m_val, m_rc, m_reason);
#                                    measure_hung, measure_done record them (pmbench
#                                    runs several measurements in turns with these)
#   measure_skip SETTING LABEL PROVIDER TEST SIZE METRIC REASON
#                                    records NA without running anything
#   ratio_table SETTING BASE PEER... one line per (test,size,metric): BASE's median and
#                                    BASE ÷ PEER for each peer
#   plot_setting SETTING TITLE       OUT_DIR/SETTING_lat.png and OUT_DIR/SETTING_bw.png
#   bench_stop_child                 ends the run in progress (for signal traps)
#
# Globals read: bench_idx / bench_total (progress counter; measure increments
# bench_idx), bench_label_title[LABEL] (plot legend, optional).

declare -A bench_label_title=()
bench_idx=0
bench_total=0
bench_child=""

bench_init() {
    out_dir="$1" reps="$2" run_timeout="$3"
    mkdir -p "$out_dir"
    raw="$out_dir/raw.csv"
    med="$out_dir/median.csv"
    notes="$out_dir/notes.txt"
    errlog="$out_dir/stderr.log"
    echo "setting,label,provider,test,size,metric,rep,value,status,secs" >"$raw"
    echo "setting,label,provider,test,size,metric,median,min,max,n_ok,reps" >"$med"
    : >"$notes"
    : >"$errlog"
}

# field NAME from a result line on stdin
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }

# median, min, max of the numbers on stdin ("NA NA NA" if none)
stats() {
    sort -g | awk '{ v[NR] = $1 }
        END { if (NR == 0) { print "NA NA NA"; exit }
              m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              print m, v[1], v[NR] }'
}

# The reason a run gave no value, from its status and its stderr.
why_failed() {
    local rc="$1" errf="$2" secs="${3:-$run_timeout}" line
    if ((rc == 124 || rc == 137)); then echo "timed out after ${secs}s"; return; fi
    # the program's own FAIL line says most; the supervisor's lines less
    line="$(grep -a -m1 'FAIL' "$errf" 2>/dev/null | cut -c1-200)"
    [[ -n "$line" ]] || line="$(grep -a -m1 -E 'with signal|by signal|[Ee]rror|failed|not permitted' "$errf" 2>/dev/null | cut -c1-200)"
    [[ -n "$line" ]] || line="exit status $rc, no result line"
    echo "$line"
}

bench_run() {
    local secs="$1" outf="$2"; shift 3
    # In the background, so that a signal reaches our trap at once; timeout
    # runs the program in its own process group and ends the whole group.
    timeout -k 5 "$secs" "$@" >"$outf" 2>"$out_dir/last.err" </dev/null &
    bench_child=$!
    local rc=0
    wait "$bench_child" || rc=$?
    bench_child=""
    return $rc
}

bench_stop_child() {
    [[ -n "$bench_child" ]] || return 0
    kill -TERM "$bench_child" 2>/dev/null
    wait "$bench_child" 2>/dev/null
    bench_child=""
}

# one CSV row for the medians and one progress line
record_median() {
    local setting="$1" label="$2" prov="$3" test="$4" size="$5" metric="$6" nok="$7" nrep="$8" secs="$9" note="${10}"
    local m lo hi
    read -r m lo hi < <(printf '%s\n' "${vals[@]}" | grep -v '^$' | stats)
    echo "$setting,$label,$prov,$test,$size,$metric,$m,$lo,$hi,$nok,$nrep" >>"$med"
    bench_idx=$((bench_idx + 1))
    printf '[%*d/%d] %-7s %-11s %-9s %8s %-9s %12s  (%d/%d ok, %ss)%s\n' "${#bench_total}" "$bench_idx" \
        "$bench_total" "$setting" "$label" "$test" "$size" "$metric" "$m" "$nok" "$nrep" "$secs" "$note"
}

# One run of a measurement, rep R: appends its row to raw.csv; sets m_val
# (the value, or NA), m_rc (the status) and m_reason (why NA, else empty).
measure_once() {
    local setting="$1" label="$2" prov="$3" test="$4" size="$5" metric="$6" match="$7" r="$8"; shift 9
    local line v t0 t1 tmp="$out_dir/last.out"
    t0=$(date +%s.%N)
    m_rc=0
    bench_run "$run_timeout" "$tmp" -- "$@" || m_rc=$?
    t1=$(date +%s.%N)
    { echo "### $setting $label $test size=$size rep=$r status=$m_rc: $*"; cat "$out_dir/last.err"; } >>"$errlog"
    line="$(grep -a "^prov=" "$tmp" | grep -a -F -- "$match" | tail -1)"
    v=""
    [[ -n "$line" ]] && v="$(field "$metric" <<<"$line")"
    # bw_MBps is printed with 2 decimals (0.00 for tiny messages on a slow
    # path); size / lat_us is the same quantity with more digits when lat_us >= 1
    if [[ $metric == bw_MBps && -n "$v" ]]; then
        v="$(awk -v s="$size" -v l="$(field lat_us <<<"$line")" -v b="$v" \
            'BEGIN { if (l + 0 >= 1) printf "%.6g\n", s / l; else print b }')"
    fi
    m_reason=""
    if [[ -n "$v" && $m_rc -eq 0 ]]; then
        m_val=$v
    else
        m_val=NA
        m_reason="$(why_failed "$m_rc" "$out_dir/last.err")"
    fi
    echo "$setting,$label,$prov,$test,$size,$metric,$r,$m_val,$m_rc,$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >>"$raw"
}

# A run that hung will hang again: whether m_rc says it timed out.
measure_hung() { ((m_rc == 124 || m_rc == 137)); }

# The median's row and progress line from vals (set by the caller), with
# the first reason for a missing value (if any) noted.
measure_done() {
    local setting="$1" label="$2" prov="$3" test="$4" size="$5" metric="$6" nok="$7" secs="$8" reason="$9" note=""
    if [[ -n "$reason" ]]; then
        note="  NA: $reason"
        echo "$setting $label $test size=$size: $reason" >>"$notes"
    fi
    record_median "$setting" "$label" "$prov" "$test" "$size" "$metric" "$nok" "$reps" "$secs" "$note"
}

measure() {
    local setting="$1" label="$2" prov="$3" test="$4" size="$5" metric="$6" match="$7"; shift 8
    local r nok=0 reason="" start=$SECONDS
    vals=()
    for ((r = 1; r <= reps; r++)); do
        measure_once "$setting" "$label" "$prov" "$test" "$size" "$metric" "$match" "$r" -- "$@"
        if [[ $m_val != NA ]]; then
            vals+=("$m_val")
            nok=$((nok + 1))
        else
            [[ -n "$reason" ]] || reason=$m_reason
        fi
        if measure_hung; then
            for ((r = r + 1; r <= reps; r++)); do
                echo "$setting,$label,$prov,$test,$size,$metric,$r,NA,skipped,0" >>"$raw"
            done
        fi
    done
    measure_done "$setting" "$label" "$prov" "$test" "$size" "$metric" "$nok" "$((SECONDS - start))" "$reason"
}

measure_skip() {
    local setting="$1" label="$2" prov="$3" test="$4" size="$5" metric="$6" reason="$7" r
    vals=()
    for ((r = 1; r <= reps; r++)); do
        echo "$setting,$label,$prov,$test,$size,$metric,$r,NA,skipped,0" >>"$raw"
    done
    record_median "$setting" "$label" "$prov" "$test" "$size" "$metric" 0 "$reps" 0 "  NA: skipped ($reason)"
}

# BASE's median and BASE ÷ PEER per peer, for every (test,size,metric) BASE or
# a peer has in SETTING, in the order they were measured.
ratio_table() {
    local setting="$1" base="$2"; shift 2
    local peers="$*"
    echo
    echo "== $setting: $base ÷ peer, on medians (lat_us: below 1 = $base faster;" \
         "bw_MBps, mrate_Mps: above 1 = $base faster)"
    awk -F, -v s="$setting" -v base="$base" -v peers="$peers" '
        BEGIN { np = split(peers, p, " ")
                printf "%-9s %8s %-9s %11s", "test", "size", "metric", base
                for (i = 1; i <= np; i++) printf " %9s", "/" p[i]
                printf "\n" }
        NR > 1 && $1 == s { key = $4 "," $5 "," $6; val[$2 SUBSEP key] = $7
                            if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
        END { for (k = 1; k <= n; k++) {
                  key = order[k]
                  if (!((base SUBSEP key) in val)) continue
                  b = val[base SUBSEP key]; split(key, f, ",")
                  line = sprintf("%-9s %8s %-9s %11s", f[1], f[2], f[3], b); any = 0
                  for (i = 1; i <= np; i++) {
                      if (!((p[i] SUBSEP key) in val)) { line = line sprintf(" %9s", "-"); continue }
                      q = val[p[i] SUBSEP key]; any = 1
                      r = (b != "NA" && q != "NA" && q + 0 != 0) ? sprintf("%.3f", b / q) : "NA"
                      line = line sprintf(" %9s", r) }
                  if (any) print line } }' "$med"
}

# Human size for axis labels: 1, 64, 4K, 1M.
human_size() {
    local s="$1"
    if ((s >= 1048576 && s % 1048576 == 0)); then echo "$((s / 1048576))M"
    elif ((s >= 1024 && s % 1024 == 0)); then echo "$((s / 1024))K"
    else echo "$s"; fi
}

# One PNG per metric: latency (ping-pong lat_us) and bandwidth (bw_MBps) vs
# size, log-log, one line per label measured in SETTING.
plot_setting() {
    local setting="$1" title="$2"
    command -v gnuplot >/dev/null || { echo "plots skipped: gnuplot not found (apt-get install gnuplot-nox)"; return 0; }
    local dir="$out_dir/plot" kind test metric ylabel png labels label dat plots xt s style
    mkdir -p "$dir"
    for kind in lat bw; do
        if [[ $kind == lat ]]; then test=pingpong metric=lat_us ylabel="latency, half round trip (us)"
        else test=bw metric=bw_MBps ylabel="bandwidth (MB/s, one way, streaming)"; fi
        png="$out_dir/${setting}_${kind}.png"
        labels="$(awk -F, -v s="$setting" -v t="$test" -v m="$metric" \
            'NR > 1 && $1 == s && $4 == t && $6 == m && $7 != "NA" && !seen[$2]++ { print $2 }' "$med")"
        if [[ -z "$labels" ]]; then
            echo "plot $png: no values, not drawn"
            rm -f "$png"
            continue
        fi
        plots="" xt=""
        for label in $labels; do
            dat="$dir/${setting}.${label}.${kind}.dat"
            awk -F, -v s="$setting" -v t="$test" -v m="$metric" -v l="$label" \
                'NR > 1 && $1 == s && $2 == l && $4 == t && $6 == m && $7 != "NA" { print $5, $7, $8, $9 }' "$med" |
                sort -g >"$dat"
            # floors dashed and grey, providers in gnuplot's default colours
            case "$label" in floor|raw) style="lw 2 dt 2 pt 6 lc rgb \"#555555\"" ;; *) style="lw 2 pt 7 ps 0.8" ;; esac
            plots+="${plots:+, }\"$dat\" using 1:2 with linespoints $style title \"${bench_label_title[$label]:-$label}\""
        done
        for s in $(awk -F, -v s="$setting" 'NR > 1 && $1 == s && $7 != "NA" { print $5 }' "$med" | sort -gu); do
            xt+="${xt:+, }\"$(human_size "$s")\" $s"
        done
        gnuplot <<EOF 2>>"$errlog" || echo "plot $png: gnuplot failed (see $errlog)"
set terminal pngcairo size 960,640 font "sans,11" noenhanced
set output "$png"
set title "$title: ${ylabel%% (*} vs message size"
set xlabel "message size (bytes)"
set ylabel "$ylabel"
set logscale xy
set xtics ($xt)
set grid xtics ytics mytics
set key top left box opaque
plot $plots
EOF
        [[ -s "$png" ]] && echo "plot: $png"
    done
}
