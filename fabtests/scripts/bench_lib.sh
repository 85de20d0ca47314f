# Shared pieces of the benchmark scripts (sourced): CSV files, repetitions
# with the median kept, ratio tables.
#   bench_init OUT_DIR REPS     creates OUT_DIR/raw.csv and OUT_DIR/median.csv
#   measure PROV TEST SIZE METRIC -- command...
#   ratio_table NUM DEN         one line per (test,size,metric) both measured

bench_init() {
    out_dir="$1" reps="$2"
    mkdir -p "$out_dir"
    raw="$out_dir/raw.csv"
    med="$out_dir/median.csv"
    echo "prov,test,size,metric,rep,value" >"$raw"
    echo "prov,test,size,metric,value" >"$med"
}

# field NAME from a result line on stdin
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "NA"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

measure() {
    local prov="$1" test="$2" size="$3" metric="$4"; shift 5
    local vals=() v line
    for ((r = 1; r <= reps; r++)); do
        if line="$("$@" 2>>"$out_dir/stderr.log" | grep "^prov=" | grep " size=$size " | tail -1)" && [[ -n "$line" ]]; then
            v="$(field "$metric" <<<"$line")"
        else
            v="NA"
        fi
        echo "$prov,$test,$size,$metric,$r,$v" >>"$raw"
        [[ "$v" != NA ]] && vals+=("$v")
    done
    if [[ ${#vals[@]} -gt 0 ]]; then v="$(printf '%s\n' "${vals[@]}" | median)"; else v=NA; fi
    echo "$prov,$test,$size,$metric,$v" >>"$med"
    printf '  %-14s %-16s %8s  %-10s %s\n' "$prov" "$test" "$size" "$metric" "$v"
}

ratio_table() {
    local num="$1" den="$2"
    echo
    echo "ratio $num / $den (lat_us: lower is better; bw_MBps, mrate_Mps: higher is better)"
    printf '%-16s %8s %-10s %12s %12s %8s\n' test size metric "$num" "$den" ratio
    awk -F, -v a="$num" -v b="$den" '
        NR > 1 { key = $2 "," $3 "," $4; if ($1 == a) va[key] = $5; if ($1 == b) vb[key] = $5;
                 if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
        END { for (i = 1; i <= n; i++) { k = order[i]; if (!(k in va) || !(k in vb)) continue;
                  split(k, f, ",");
                  r = (va[k] != "NA" && vb[k] != "NA" && vb[k] + 0 != 0) ? sprintf("%.3f", va[k] / vb[k]) : "NA";
                  printf "%-16s %8s %-10s %12s %12s %8s\n", f[1], f[2], f[3], va[k], vb[k], r } }' "$med"
}
