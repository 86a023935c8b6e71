#!/usr/bin/env bash
# Fuzzes the pure parsers with libFuzzer (docs/fuzzing.md). Not part of CI.
#
#   scripts/fuzz.sh normalizer|rfc3339|postback-url|all SECONDS
#
# Builds the harness with -sanitize=fuzzer,address into .build-fuzz, then runs it for SECONDS
# (each target, for `all`) on its seeds (Tests/Fuzz/Seeds/<target>, and for the normalizer
# every golden input) and on a working corpus kept in .build-fuzz/fuzz/<target>/corpus, which
# grows from run to run and is never committed. Crash, leak and timeout inputs land in
# .build-fuzz/fuzz/<target>/artifacts; the full libFuzzer log in .../last.log. After a clean run
# the working corpus is minimized with libFuzzer's -merge=1.
# Everything runs under nice -n 19. Exits 1 when any target found a failing input.
#
# Installs nothing: libFuzzer and AddressSanitizer come with the Swift toolchain's clang
# runtime (libclang_rt.fuzzer and libclang_rt.asan); the script stops if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: scripts/fuzz.sh normalizer|rfc3339|postback-url|all SECONDS" >&2
    exit 64
}
[ $# -eq 2 ] || usage
case "$1" in
    normalizer | rfc3339 | postback-url) targets=("$1") ;;
    all) targets=(normalizer rfc3339 postback-url) ;;
    *) usage ;;
esac
seconds=$2
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage

swiftc_path=$(command -v swiftc) || { echo "fuzz: swiftc not found" >&2; exit 69; }
runtime_dir="$(dirname "$(readlink -f "$swiftc_path")")/../lib/swift/clang/lib/linux"
if ! ls "$runtime_dir"/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
    echo "fuzz: this Swift toolchain has no libFuzzer runtime (libclang_rt.fuzzer-*.a in $runtime_dir);" >&2
    echo "fuzz: use a swift.org toolchain for Linux, which ships it" >&2
    exit 69
fi

build_path=.build-fuzz
work_root=$build_path/fuzz
build_flags=(--build-path "$build_path" -c release
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DTRACKPIPE_LIBFUZZER)

failed=()
summaries=()
for target in "${targets[@]}"; do
    product=fuzz-$target
    echo "fuzz: building $product (release, -sanitize=fuzzer,address)" >&2
    nice -n 19 swift build "${build_flags[@]}" --product "$product" 2>&1 \
        | grep -v "Cannot export local symbol '__asan_extra_spill_area'" >&2 || true
    binary="$(swift build "${build_flags[@]}" --show-bin-path)/$product"
    [ -x "$binary" ] || { echo "fuzz: build of $product failed" >&2; exit 1; }

    work=$work_root/$target
    mkdir -p "$work/corpus" "$work/artifacts"
    corpora=("$work/corpus" "Tests/Fuzz/Seeds/$target")
    if [ "$target" = normalizer ]; then
        # The golden inputs, without their expected verdicts, as one flat directory of seeds.
        rm -rf "$work/golden" && mkdir -p "$work/golden"
        for file in Tests/TrackingDomainTests/Golden/*/*.json; do
            case "$file" in *.expected.json) continue ;; esac
            topic=$(basename "$(dirname "$file")")
            cp "$file" "$work/golden/$topic-$(basename "$file")"
        done
        corpora+=("$work/golden")
    fi

    before=$(find "$work/artifacts" -type f | wc -l)
    log=$work/last.log
    echo "fuzz: running $product for ${seconds}s (log: $log)" >&2
    status=0
    # SWIFT_BACKTRACE: the Swift runtime's crash backtracer reads memory in a way that trips
    # AddressSanitizer; libFuzzer reports the crash (with its own stack trace) without it.
    SWIFT_BACKTRACE=enable=no nice -n 19 "$binary" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" "${corpora[@]}" >"$log" 2>&1 || status=$?
    after=$(find "$work/artifacts" -type f | wc -l)

    # Keep the working corpus minimal for the next run: libFuzzer's merge keeps one input per
    # coverage feature it adds (skipped after a failure, which the corpus must keep reproducing).
    if [ "$status" -eq 0 ] && [ "$after" -eq "$before" ]; then
        rm -rf "$work/corpus.merged" && mkdir "$work/corpus.merged"
        if SWIFT_BACKTRACE=enable=no nice -n 19 "$binary" -merge=1 "$work/corpus.merged" "$work/corpus" >"$work/merge.log" 2>&1; then
            rm -rf "$work/corpus" && mv "$work/corpus.merged" "$work/corpus"
        fi
    fi

    # The last status line (DONE, or the last before a crash) and the final statistics.
    status_line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    field() { sed -nE "s/.*$1: ([0-9]+).*/\1/p" <<<"$status_line"; }
    stat() { sed -nE "s/^stat::$1: *([0-9]+).*/\1/p" "$log" | tail -n 1; }
    execs=$(stat number_of_executed_units)
    execs=${execs:-$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$status_line")}
    rate=$(stat average_exec_per_sec)
    rate=${rate:-$(field exec/s)}
    corp=$(sed -nE 's/.*corp: ([0-9]+\/[0-9]+[a-zA-Z]+).*/\1/p' <<<"$status_line")
    saved=$(find "$work/corpus" -type f | wc -l)
    findings=$((after - before))
    summary="$target: executions=${execs:-?} exec/s=${rate:-?} cov=$(field cov) ft=$(field ft) corpus=${corp:-?} (working corpus: $saved files) new-findings=$findings exit=$status"
    summaries+=("$summary")
    echo "fuzz: $summary" >&2
    if [ "$status" -ne 0 ] || [ "$findings" -gt 0 ]; then
        failed+=("$target")
        grep -E 'ERROR: |Fatal error|fuzz property violated|Test unit written to' "$log" | head -n 20 >&2 || true
        echo "fuzz: reproduce with: swift build --product $product && .build/debug/$product <artifact>" >&2
    fi
done

echo
echo "Results (${seconds}s per target):"
printf '  %s\n' "${summaries[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "Failing inputs found by: ${failed[*]} (see $work_root/<target>/artifacts)"
    exit 1
fi
