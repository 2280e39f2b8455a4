#!/usr/bin/env bash
# da3-edge's first boot, from the bundle `da3-edge card` put on the boot partition
# (/boot/firmware/da3-edge/): cloud-init's runcmd runs it once. It installs from the
# bundle with scripts/install-pi.sh, logging to /var/log/da3-edge-install.log. Then:
#   installed  the bundle is removed (the FAT partition is small: ~200 MB of models),
#              and da3-edge-installed.txt says so (da3-edge card refuses the card then);
#   failed     the bundle stays and /boot/firmware/da3-edge-install-failed.txt says
#              why, readable on the laptop the card goes back to.
# Until it has installed, every boot runs it again (da3-edge-first-boot.service, which it
# writes first and removes once installed): cloud-init runs runcmd once, and a reboot or
# a power cut during the install (a Pi unplugged because its first boot seemed stuck)
# would otherwise leave it half done for good. Run it again by hand to retry at once:
# sudo bash /boot/firmware/da3-edge/first-boot.sh
set -uo pipefail

# Imager marks every network interface optional, so cloud-init may run this before the
# network is up; and a Pi has no clock battery: until NTP answers, its clock says the
# image's build date, and TLS certificates are "not yet valid". So first: a default
# route, a name that resolves, a clock not earlier than the card (each wait bounded,
# logged; past the bound the install does not start and the failure note says why).
WAIT_S=${DA3_EDGE_FIRST_BOOT_WAIT:-300}

wait_for() {  # wait_for WHAT CMD...: CMD until it succeeds, WAIT_S at most
    local what=$1 start=$SECONDS
    shift
    until "$@" >/dev/null 2>&1; do
        if [ $((SECONDS - start)) -ge "$WAIT_S" ]; then
            echo "da3-edge first boot: no $what after $WAIT_S s"
            return 1
        fi
        sleep 2
    done
    echo "da3-edge first boot: $what after $((SECONDS - start)) s"
}
has_route() { [ -n "$(ip route show default; ip -6 route show default)" ]; }
resolves() { getent ahosts pypi.org; }
UNIT=/etc/systemd/system/da3-edge-first-boot.service

# The unit waits for the boot partition's mount (its condition is the bundle there), is
# ordered after nothing of cloud-init's (cloud-final.service comes after
# multi-user.target, which would make a cycle systemd breaks by dropping this unit), and
# is started, not waited for (Type=exec): the boot does not wait out the install.
resume_at_boot() {  # resume_at_boot SCRIPT: the unit that runs SCRIPT at each boot until it is gone
    [ -f "$UNIT" ] && return 0
    cat >"$UNIT.tmp" <<EOF
[Unit]
Description=da3-edge first boot, resumed: the install from the card's bundle
RequiresMountsFor=$(dirname "$(dirname "$1")")
ConditionPathExists=$1

[Service]
Type=exec
ExecStart=/bin/bash $1

[Install]
WantedBy=multi-user.target
EOF
    mv "$UNIT.tmp" "$UNIT" && systemctl enable "$(basename "$UNIT")" >/dev/null 2>&1
    sync
}

done_at_boot() {
    systemctl disable "$(basename "$UNIT")" >/dev/null 2>&1
    rm -f "$UNIT"
}

clock_ok() {  # not before the card was made (FAT keeps local time: a day's margin), or NTP's
    [ "$(date +%s)" -ge $(($(stat -c %Y "$1") - 86400)) ] ||
        [ "$(timedatectl show -p NTPSynchronized 2>/dev/null)" = NTPSynchronized=yes ]
}

main() {
    local here boot log failed wheel rc
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    boot=$(dirname "$here")
    log=/var/log/da3-edge-install.log
    failed=$boot/da3-edge-install-failed.txt
    local args=(--models "$here/models") url sha source hub
    if [ -f "$here/models-url" ]; then  # da3-edge card --models URL: fetched here
        read -r url sha <"$here/models-url"
        args=(--models-url "$url" --models-sha256 "$sha")
    elif [ -d "$here/release" ]; then  # the card carries DA3's release: built here from it
        args=(--build-models "$here/release")
    elif [ -f "$here/models-build" ]; then  # no models: built here from the hub's release
        read -r source sha hub <"$here/models-build"
        args=(--build-models "$source")
        [ "$sha" = - ] || args+=(--weights-sha256 "$sha")
        [ "$hub" = - ] || export HF_ENDPOINT=$hub
    fi
    for wheel in "$here"/dist/da3_edge-*.whl; do args+=(--from "$wheel"); done
    [ -f "$here/da3-edge.toml" ] && args+=(--config "$here/da3-edge.toml")
    [ -f "$here/serve-users" ] && args+=(--serve-users "$here/serve-users")
    # One at a time: the unit and a retry by hand wait for each other.
    exec 8>/run/da3-edge-first-boot.lock
    flock 8
    [ -f "$here/first-boot.sh" ] || return 0  # installed meanwhile by the other
    resume_at_boot "$here/first-boot.sh"
    echo "da3-edge first boot: $(date -u +%FT%TZ), install-pi.sh ${args[*]}" >>"$log"
    {
        wait_for "network (a default route)" has_route &&
            wait_for "name lookup (pypi.org)" resolves &&
            wait_for "clock not earlier than the card ($(date -u -d "@$(stat -c %Y "$here/first-boot.sh")" +%F))" \
                clock_ok "$here/first-boot.sh" &&
            bash "$here/scripts/install-pi.sh" "${args[@]}"
    } 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then
        rm -f "$failed"
        # For `da3-edge card` on the laptop: this card's first boot has run (cloud-init
        # will not run it again), whatever its user-data still says.
        echo "da3-edge installed at first boot, $(date -u +%FT%TZ)" >"$boot/da3-edge-installed.txt"
        rm -rf "$here"
        done_at_boot
        echo "da3-edge first boot: installed; the bundle is removed from $boot" | tee -a "$log"
    else
        {
            echo "da3-edge: the install at first boot failed (exit $rc), $(date -u +%FT%TZ)."
            echo "The last lines of $log on the Pi:"
            echo
            tail -n 25 "$log"
            echo
            echo "The bundle is still on this partition, and the next boot retries. After"
            echo "fixing the cause (the network, say), reboot, or retry at once on the Pi:"
            echo "sudo bash $here/first-boot.sh"
        } >"$failed.tmp" && mv "$failed.tmp" "$failed"
        echo "da3-edge first boot: FAILED (exit $rc); see $failed" | tee -a "$log"
    fi
    sync
    return "$rc"
}

# One call, parsed whole before it runs: the script's own file goes with the bundle.
main "$@"
exit
