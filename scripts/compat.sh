#!/usr/bin/env bash
# The librdkafka support matrix's second column: runs the Kafka and pipeline test suites with a
# current librdkafka loaded at run time instead of Debian 12's 2.0.2 (README, "Supported
# librdkafka versions"; docs/compatibility.md).
#
# trackpipe compiles against the system headers (librdkafka-dev, 2.0.2) and links librdkafka.so.1;
# any later 2.x exports every symbol 2.0.2 has, so the same binaries run on it. The newer library
# comes from the `confluent-kafka` wheel on PyPI, which bundles one (confluent_kafka.libs/
# librdkafka-<hash>.so.1): it is downloaded (not installed) into .build-compat/, given the name
# librdkafka.so.1 there, and put first on LD_LIBRARY_PATH. The run fails unless the library the
# binaries actually load is that one (checked through `trackpipe version` and, inside the test
# process, by a test that compares rd_kafka_version_str() with the expected version).
#
# Environment:
#   COMPAT_CONFLUENT_KAFKA  the wheel's version, a pip specifier (default 2.16.*)
#   COMPAT_FILTER           a regex of the test modules to run (default 'KafkaTests|PipelineTests')
# Needs python3 with pip (installed from Debian's packages when missing) and PyPI access.
set -euo pipefail
cd "$(dirname "$0")/.."

wheel_version=${COMPAT_CONFLUENT_KAFKA:-2.16.*}
filter=${COMPAT_FILTER:-KafkaTests|PipelineTests}
scratch=.build-compat

fail() {
    echo "compat: $*" >&2
    exit 1
}

./scripts/setup.sh
if ! python3 -m pip --version >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    echo "compat: installing python3-pip (to download the confluent-kafka wheel)" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi

swift build --build-tests
bin=$(swift build --show-bin-path)

# A fresh download each run: the specifier may now match a newer wheel.
rm -rf "$scratch/wheel" "$scratch/unpacked" "$scratch/lib"
mkdir -p "$scratch/wheel" "$scratch/lib"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$scratch/wheel" "confluent-kafka==$wheel_version" \
    || fail "could not download confluent-kafka==$wheel_version from PyPI. Check the network (PyPI must be reachable) or set COMPAT_CONFLUENT_KAFKA to a version that has a wheel for this machine"
wheels=("$scratch"/wheel/confluent_kafka-*.whl)
[ -f "${wheels[0]}" ] || fail "pip reported success but left no confluent_kafka wheel in $scratch/wheel"
python3 -m zipfile -e "${wheels[0]}" "$scratch/unpacked"
libs=("$scratch"/unpacked/confluent_kafka.libs/librdkafka-*.so.1)
[ ${#libs[@]} -eq 1 ] && [ -f "${libs[0]}" ] \
    || fail "expected exactly one confluent_kafka.libs/librdkafka-*.so.1 in $(basename "${wheels[0]}"), found: ${libs[*]}. The wheel's layout changed: look inside it and adjust this script"
ln -s "$PWD/${libs[0]}" "$scratch/lib/librdkafka.so.1"
libdir="$PWD/$scratch/lib"

# Which librdkafka each run loads, from the binary itself, and which file the test binary resolves.
loaded_version() { "$bin/trackpipe" version | sed -n 's/^librdkafka //p'; }
system=$(loaded_version)
newer=$(LD_LIBRARY_PATH="$libdir" loaded_version)
resolved=$(LD_LIBRARY_PATH="$libdir" ldd "$bin/trackpipePackageTests.xctest" | awk '$1 == "librdkafka.so.1" { print $3 }')
wheel=$(basename "${wheels[0]}")
wheel_minor=$(echo "$wheel" | sed -n 's/^confluent_kafka-\([0-9]*\.[0-9]*\)\..*/\1/p')
echo "compat: $wheel"
echo "compat: librdkafka without LD_LIBRARY_PATH: $system"
echo "compat: librdkafka with LD_LIBRARY_PATH=$libdir: $newer"
echo "compat: the test binary resolves librdkafka.so.1 to $resolved"
if [ -z "$newer" ] || [ "$newer" = "2.0.2" ] || [ "${newer%.*}" != "$wheel_minor" ] || [ "$resolved" != "$libdir/librdkafka.so.1" ]; then
    fail "the binaries do not load the wheel's librdkafka (expected $wheel_minor.x from $libdir/librdkafka.so.1, got ${newer:-nothing} from ${resolved:-nowhere}): LD_LIBRARY_PATH did not take effect (an RPATH in the binary?) or the link is missing or points at another library. Nothing was tested"
fi

echo "compat: the test modules '$filter' on librdkafka $newer"
start=$(date +%s)
status=0
LD_LIBRARY_PATH="$libdir" TRACKPIPE_EXPECTED_LIBRDKAFKA="$newer" \
    ./scripts/run-tests.sh "$filter" || status=$?
echo "compat: librdkafka $newer: the tests exited $status after $(($(date +%s) - start)) s"
exit $status
