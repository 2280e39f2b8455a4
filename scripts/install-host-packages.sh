#!/usr/bin/env bash
# Install the Debian packages of requirements/apt.txt that this host lacks (root).
# .ci/run installs them all before anything runs; scripts run by hand name the ones
# they need, which must be on the list.
#
#   scripts/install-host-packages.sh                          # the whole list
#   scripts/install-host-packages.sh qemu-user-static mmdebstrap
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t listed < <(sed -E '/^(#|[[:space:]]*$)/d; s/[[:space:]].*//' requirements/apt.txt)
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${listed[@]}")
missing=()
for package in "${wanted[@]}"; do
    if ! printf '%s\n' "${listed[@]}" | grep -qx -- "$package"; then
        echo "install-host-packages.sh: $package is not on requirements/apt.txt; add it there" >&2
        exit 2
    fi
    dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -qx 'install ok installed' \
        || missing+=("$package")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
