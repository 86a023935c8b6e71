#!/usr/bin/env bash
# Runs the built test suites (swift build --build-tests first), each suite in a test process of
# its own, several processes at once.
#
# Why not one `swift test`: Swift Testing runs a process's tests on Swift's cooperative thread
# pool, one thread per core, and most of these tests block a thread while they wait on a broker
# or a worker process (measured: ten tests that each sleep 2 s take 10 s in one process on this
# 2-core machine, 2 s when they await instead). One process therefore waits on two tests at a
# time, with the cores idle. Several processes wait on several; a suite marked `.serialized` stays
# whole in its process, so it still runs one test at a time.
#
# Usage: scripts/run-tests.sh [MODULES]   MODULES: a regex of test modules (default: all)
# Environment:
#   TEST_PROCESSES   test processes at once (default 4)
# Exits non-zero when a suite fails, or when the suites' processes did not run every listed test.
set -euo pipefail
cd "$(dirname "$0")/.."

modules=${1:-.*}
jobs=${TEST_PROCESSES:-4}
bin=$(swift build --show-bin-path)
tests="$bin/trackpipePackageTests.xctest"
[ -x "$tests" ] || { echo "run-tests: $tests not found: run swift build --build-tests first" >&2; exit 1; }
logs=$(mktemp -d "${TMPDIR:-/tmp}/trackpipe-tests.XXXXXX")

# The suites that take a minute or more on their own (measured; the run prints each suite's time),
# longest first: started first, none of them is left to end the run alone.
slow=(
    TrackpipeCLITests.StateRestoreCommandTests TrackpipeCLITests.BrokerOutageCommandTests PipelineTests.ScaleOutTests
    PipelineTests.SimulationTests PipelineTests.PipelineEndToEndTests PipelineTests.OperatorTests PipelineTests.GroupChangeTests
    PipelineTests.BackpressureTests TrackpipeCLITests.ScaleOutCommandTests TrackpipeCLITests.SeveralSizesCommandTests
    TrackpipeCLITests.GroupIdentityCommandTests TrackpipeCLITests.RunCommandEndToEndTests
    PipelineTests.ChangelogRestoreTests TrackpipeCLITests.BoundedRunTests
)

# Every test's identifier (Module.Suite/test()), and the suites: the slow ones, then the rest of
# the end-to-end modules, then the others.
"$tests" --testing-library swift-testing --list-tests 2>/dev/null | grep -E "^($modules)\." > "$logs/tests" || true
listed=$(wc -l < "$logs/tests")
[ "$listed" -gt 0 ] || { echo "run-tests: no test matches the modules '$modules'" >&2; exit 1; }
mapfile -t suites < <(
    cut -d/ -f1 "$logs/tests" | sort -u \
        | awk -F. -v slow="${slow[*]}" '
            BEGIN { n = split(slow, list, " "); for (i = 1; i <= n; i++) order[list[i]] = i }
            { rank = ($0 in order) ? order[$0] : ($1 == "TrackpipeCLITests") ? 100 : ($1 == "PipelineTests") ? 101 : ($1 == "KafkaTests") ? 102 : 103
              print rank " " $0 }' \
        | sort -k1,1n -s | cut -d' ' -f2
)
echo "run-tests: ${#suites[@]} suites, $listed tests, $jobs processes at once; logs in $logs"

# One suite in its own process; prints a line when it ends.
run_suite() {
    local suite=$1 start=$SECONDS status=0
    NO_COLOR=1 "$tests" --testing-library swift-testing --filter "^${suite//./\\.}/" > "$logs/$suite.log" 2>&1 || status=$?
    if [ $status -eq 0 ]; then
        echo "✔ $suite ($((SECONDS - start)) s)"
    else
        echo "✘ $suite ($((SECONDS - start)) s, exit $status)"
    fi
    return $status
}

start=$SECONDS
failed=0
running=0
for suite in "${suites[@]}"; do
    if [ $running -ge "$jobs" ]; then
        wait -n || failed=$((failed + 1))
        running=$((running - 1))
    fi
    run_suite "$suite" &
    running=$((running + 1))
done
while [ $running -gt 0 ]; do
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
done

# Every listed test ran: a filter that missed a test would otherwise pass in silence.
ran=$(cat "$logs"/*.log | sed -n 's/^.*Test run with \([0-9]*\) tests\{0,1\} .*$/\1/p' | awk '{ sum += $1 } END { print sum + 0 }')
echo
failures=()
if [ "$failed" -gt 0 ]; then
    for log in "$logs"/*.log; do
        if grep -q '✘' "$log" || ! grep -q 'Test run with .* passed' "$log"; then
            failures+=("$(basename "$log" .log)")
            echo "==== $(basename "$log" .log) ===="
            grep -vE '^◇|^✔' "$log" | tail -200
            echo
        fi
    done
fi
# The last lines name what failed: a CI log is often read from its end.
for suite in "${failures[@]}"; do echo "run-tests: failed: $suite"; done
echo "run-tests: $ran of $listed tests ran in ${#suites[@]} suites, $failed suites failed, $((SECONDS - start)) s"
[ "$failed" -eq 0 ] && [ "$ran" -eq "$listed" ]
