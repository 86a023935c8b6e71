#!/usr/bin/env bash
# Installs the system packages trackpipe builds and runs with, only if any is missing.
# librdkafka-dev: the Kafka client library; kcat: the raw-consumer baseline for benchmarks.
set -euo pipefail
needed=(librdkafka-dev pkg-config kcat)
missing=()
for package in "${needed[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    echo "setup: installing ${missing[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
