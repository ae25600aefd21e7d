# SPDX-License-Identifier: Apache-2.0
# libiscsi iscsi-test-cu helpers (sourced after lib.sh).
#
# icu_run LABEL URL SUITES   run each suite (comma list, e.g. SCSI.Read10,SCSI.Unmap)
#                            as its own iscsi-test-cu process under a time limit;
#                            writes $E2E_OUT/icu-LABEL.tsv: "<Suite>.<Test> PASS|FAIL|SKIP"
# icu_gate LABEL BASELINE    fail on any FAIL not listed in BASELINE ("Suite.Test  reason")
# icu_table LABEL [LABEL2]   per-suite pass/fail/skip counts, two runs side by side
#
# iscsi-test-cu's own "passed" includes tests that skipped themselves (they
# print "[SKIPPED] ..." and then pass): we count those as SKIP.

ICU_SUITE_TIMEOUT=${ICU_SUITE_TIMEOUT:-240}

# _icu_parse : CUnit verbose output on stdin -> "Suite.Test STATUS" lines
_icu_parse() {
    awk '
    function flush() { if (test != "") { print suite "." test, (st == "" ? "FAIL" : st); test = "" } }
    /^Suite: /        { flush(); suite = $2; next }
    /^  Test: /       { flush(); test = $2; st = ""; skipped = 0
                        if ($0 ~ /\[SKIPPED\]/) skipped = 1
                        if ($0 ~ /\.\.\.passed$/) { st = skipped ? "SKIP" : "PASS"; flush() }
                        else if ($0 ~ /\.\.\.FAILED$/) { st = "FAIL"; flush() }
                        next }
    test == ""        { next }
    /\[SKIPPED\]/     { skipped = 1 }
    /^passed$/        { st = skipped ? "SKIP" : "PASS"; flush(); next }
    /^FAILED$/        { st = "FAIL"; flush(); next }
    END               { flush() }'
}

icu_run() {
    local label=$1 url=$2 suites=$3 s rc t0 log tsv bad=0
    tsv=$E2E_OUT/icu-$label.tsv
    : > "$tsv"
    for s in ${suites//,/ }; do
        log=$LOGDIR/icu-$label-$s.log; t0=$(now)
        timeout -k 5 "$ICU_SUITE_TIMEOUT" iscsi-test-cu --dataloss --test="$s" "$url" > "$log" 2>&1
        rc=$?
        _icu_parse < "$log" >> "$tsv"
        printf '%-32s rc=%-3d %6.1fs  %s\n' "$s" $rc "$(elapsed $t0)" \
            "$(_icu_parse < "$log" | awk '{n[$2]++} END {printf "pass=%d fail=%d skip=%d", n["PASS"], n["FAIL"], n["SKIP"]}')"
        if [ $rc -ge 124 ] || ! grep -q "Run Summary" "$log"; then
            echo "  $s did not complete (rc=$rc): see $log"; bad=1
            echo "${s#*.}.__incomplete__ FAIL" >> "$tsv"
            # a hung target would make every following suite wait for its timeout
            timeout 30 iscsi-inq "$url" > /dev/null 2>&1 || { echo "  target no longer answers; stopping"; return 1; }
        fi
    done
    return $bad
}

icu_gate() {
    local label=$1 baseline=$2 tsv
    tsv=$E2E_OUT/icu-$label.tsv
    local known new stale
    known=$(sed -e 's/#.*//' "$baseline" 2>/dev/null | awk 'NF{print $1}' | sort -u)
    new=$(awk '$2=="FAIL"{print $1}' "$tsv" | sort -u | comm -23 - <(echo "$known"))
    stale=$(comm -12 <(echo "$known") <(awk '$2!="FAIL"{print $1}' "$tsv" | sort -u))
    echo "$(awk '$2=="FAIL"' "$tsv" | wc -l) failures, $(echo "$known" | grep -c .) in the baseline $baseline"
    [ -n "$stale" ] && { echo "baseline entries that now pass (remove them):"; echo "$stale" | sed 's/^/  /'; }
    if [ -n "$new" ]; then echo "NEW failures (not in the baseline):"; echo "$new" | sed 's/^/  /'; return 1; fi
    echo "no new failures"
}

# _icu_counts LABEL : "Suite pass fail skip" per suite
_icu_counts() {
    awk '{ split($1, a, "."); s = a[1]; if (!(s in seen)) { seen[s] = 1; order[++n] = s }
           c[s, $2]++ }
         END { for (i = 1; i <= n; i++) print order[i], c[order[i], "PASS"] + 0, c[order[i], "FAIL"] + 0, c[order[i], "SKIP"] + 0 }' \
        "$E2E_OUT/icu-$1.tsv"
}

icu_table() {
    local a=$1 b=${2:-}
    {
    if [ -z "$b" ]; then
        printf '%-26s %5s %5s %5s\n' "iscsi-test-cu ($a)" pass fail skip
        _icu_counts "$a" | awk '{printf "%-26s %5d %5d %5d\n", $1, $2, $3, $4; p+=$2; f+=$3; s+=$4}
                               END {printf "%-26s %5d %5d %5d\n", "TOTAL", p, f, s}'
    else
        printf '%-26s | %-17s | %-17s\n' "iscsi-test-cu suite" "$a pass/fail/skip" "$b pass/fail/skip"
        join -a1 -a2 -e- -o 0,1.2,1.3,1.4,2.2,2.3,2.4 <(_icu_counts "$a" | sort) <(_icu_counts "$b" | sort) |
            awk '{printf "%-26s | %5s %5s %5s | %5s %5s %5s\n", $1, $2, $3, $4, $5, $6, $7
                  for (i = 2; i <= 7; i++) t[i] += $i}
                 END {printf "%-26s | %5d %5d %5d | %5d %5d %5d\n", "TOTAL", t[2], t[3], t[4], t[5], t[6], t[7]}'
        echo "tests where the two differ ($a vs $b):"
        join -a1 -a2 -e- -o 0,1.2,2.2 <(sort "$E2E_OUT/icu-$a.tsv") <(sort "$E2E_OUT/icu-$b.tsv") |
            awk '$2 != $3 {printf "  %-44s %-5s %-5s\n", $1, $2, $3}'
    fi
    } | sed 's/^/E2E-TABLE /' | tee -a "$RESULTS"
}
