#!/usr/bin/env bash
# Installs the system packages trackpipe builds and runs with, only if any is missing.
# librdkafka-dev: the Kafka client library; kcat: the raw-consumer baseline for benchmarks;
# prometheus: promtool, which checks and unit-tests deploy/prometheus/alerts.yml, and the server
# the alerting end-to-end test starts on loopback.
set -euo pipefail
needed=(librdkafka-dev pkg-config kcat prometheus)
missing=()
for package in "${needed[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    echo "setup: installing ${missing[*]}" >&2
    # Debian's prometheus package would start a system-wide server (on :9090) from its
    # postinst; the tests start their own. A policy-rc.d that refuses service starts keeps
    # it stopped, unless the machine has one of its own already.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# trackpipe setup: no service starts during this install\nexit 101\n' | $sudo_cmd tee "$policy" >/dev/null
        $sudo_cmd chmod 755 "$policy"
        trap '$sudo_cmd rm -f "$policy"' EXIT
    fi
    $sudo_cmd apt-get update -qq
    # --no-install-recommends: prometheus recommends the node exporter, which nothing here uses.
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
