#!/usr/bin/env bash
# Run scripts/install-pi.sh for real in a Debian arm64 root file system under qemu-user
# emulation, twice, and check that it installs what it says and that a second run
# changes nothing. Needs root, unshare, chroot, and qemu-aarch64-static registered with
# binfmt_misc (flag F) on a non-arm64 host; the chroot needs deb.debian.org and PyPI.
#
#   scripts/arm/installer-check.sh ROOTFS_TAR MODELS_DIR [RELEASE_DIR]
#
# ROOTFS_TAR: e.g. mmdebstrap --architectures=arm64 --variant=minbase
#   --include=python3,ca-certificates bookworm rootfs.tar
# MODELS_DIR: a model directory (manifest.json + *.tflite), e.g. .cache/tests/small.
# RELEASE_DIR: the release those were made from (config.json + model.safetensors), for
#   --build-models: the Pi building its own models.
#
# Each run extracts a fresh copy of the tarball into a temporary directory, mounts what
# the chroot needs in a private mount and PID namespace (gone when the check ends, even
# on failure), and deletes the copy at the end. Emulated: timings mean nothing. Behind a
# TLS-intercepting proxy, the host's /usr/local/share/ca-certificates/*.crt and its
# proxy and SSL_CERT_FILE variables are carried into the chroot.
set -Eeuo pipefail

PROG=installer-check.sh
die() { echo "$PROG: error: $*" >&2; exit 1; }

# ------------------------------------------------------------------ inside the namespace
if [ "${1:-}" = --inner ]; then
    : "${WORK:?}" "${ROOT:?}" "${SNAP:?}" "${WHEEL:?}" "${URL_SHA:?}" "${SAME_SHA:?}" "${NEXT:?}" "${NEXT_VERSION:?}"
    mount -t proc proc "$ROOT/proc"
    if [ "$(uname -m)" != aarch64 ]; then
        # qemu 7.2 shows the guest the host's x86 /proc/cpuinfo, and LiteRT's cpuinfo then
        # crashes (SIGSEGV, or qemu hangs on it): show a Raspberry Pi 5's, as scripts/arm-lane.sh does.
        mount --bind "$SNAP/scripts/arm/cpuinfo-pi5.txt" "$ROOT/proc/cpuinfo"
    fi
    mount --rbind /dev "$ROOT/dev"
    mount -t sysfs -o ro sysfs "$ROOT/sys"
    mount -t tmpfs -o mode=0755 tmpfs "$ROOT/run"  # no /run/systemd/system: systemd is not running
    mkdir -p "$ROOT/run/lock"
    for pair in "$SNAP:/src" "$WORK/dist:/mnt/dist" "$WORK/models:/mnt/models" "$WORK/url:/mnt/url" \
        "$WORK/release:/mnt/release"; do
        mkdir -p "$ROOT${pair#*:}"
        mount --bind "${pair%%:*}" "$ROOT${pair#*:}"
        mount -o remount,bind,ro "$ROOT${pair#*:}"
    done

    envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
        LANG=C.UTF-8 TERM=dumb QEMU_CPU=cortex-a76)
    for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY \
        PIP_INDEX_URL UV_DEFAULT_INDEX UV_INDEX_URL SSL_CERT_FILE SSL_CERT_DIR PIP_CERT UV_NATIVE_TLS; do
        [ -n "${!v:-}" ] && envs+=("$v=${!v}")
    done
    in_root() { chroot "$ROOT" /usr/bin/env -i "${envs[@]}" "$@"; }
    as_daemon() {
        in_root runuser -u da3-edge -- /usr/bin/env DA3_EDGE_MODELS=/opt/da3-edge/models "$@"
    }

    if [ -n "$(ls "$ROOT"/usr/local/share/ca-certificates/*.crt 2>/dev/null)" ]; then
        in_root update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the chroot"
    fi

    FAILED=0
    CHECKS=0
    ok() { CHECKS=$((CHECKS + 1)); echo "ok    $*"; }
    bad() { CHECKS=$((CHECKS + 1)); FAILED=$((FAILED + 1)); echo "FAIL  $*"; }
    check() {  # check DESCRIPTION COMMAND...
        local desc=$1; shift
        if "$@"; then ok "$desc"; else bad "$desc"; fi
    }
    # install_run NAME ARGS...: the installer in the chroot, logged. $RUN_IN: the directory
    # it runs in (default /); $RUN_ENV: more of its environment (VAR=VALUE ...).
    install_run() {
        local name=$1 start=$SECONDS rc; shift
        echo "--- install-pi.sh $* ($name${RUN_IN:+, in $RUN_IN}${RUN_ENV:+, $RUN_ENV})"
        set +e
        # shellcheck disable=SC2086  # RUN_ENV is words
        in_root /usr/bin/env ${RUN_ENV:-} bash -c 'cd "$1" && shift && exec bash /src/scripts/install-pi.sh "$@"' \
            install "${RUN_IN:-/}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
        rc=$?
        set -e
        sed 's/^/  | /' "$WORK/$name.out"
        sed 's/^/  ! /' "$WORK/$name.err"
        echo "--- exit $rc after $((SECONDS - start)) s (emulated)"
        # Nothing the installer started holds its lock once it has ended (it inherits
        # fd 9): such a process refuses every later install. Others left in the root
        # (the check's own daemon's core worker, finishing a forward) are only named.
        local held others
        held=$(left_running lock)
        others=$(left_running)
        [ -z "$others" ] || echo "  (still running in the root: $others)"
        [ -z "$held" ] || bad "$name: processes left holding the installer's lock: $held"
        return $rc
    }
    left_running() {  # [lock]: the processes whose root is $ROOT (holding the lock): "pid: command line, ..."
        local p fd out=""
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] || continue
            if [ "${1:-}" = lock ]; then
                for fd in "$p"/fd/*; do
                    case $(readlink "$fd" 2>/dev/null) in */run/da3-edge-install.lock) break ;; esac
                    fd=""
                done
                [ -n "$fd" ] || continue
            fi
            out+="${out:+, }${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-120)"
        done
        printf '%s' "$out"
    }
    # The whole file system but the mounts (scripts/arm/tree_diff.py), to compare before the
    # first install and after the purge.
    whole_tree() { python3 "$SNAP/scripts/arm/tree_diff.py" list "$ROOT"; }
    snapshot() {  # content, owner, mode and link target of everything the installer owns
        (
            cd "$ROOT"
            dirs=(opt/da3-edge etc/da3-edge etc/systemd/system var/lib/da3-edge)
            find "${dirs[@]}" -type f -print0 | sort -z | xargs -0 sha256sum
            find "${dirs[@]}" -printf '%M %U:%G %p -> %l\n' | sort
        )
    }
    same_snapshot() { diff -u "$WORK/$1.snap" "$WORK/$2.snap" | head -n 40; cmp -s "$WORK/$1.snap" "$WORK/$2.snap"; }
    grep_not() { local re=$1; shift; ! cat "$@" | grep -E -q "$re"; }
    # The daemon's user and group once each, and serve's and publish's users in that group.
    count_users() {
        local gid
        [ "$(grep -c '^da3-edge:' "$ROOT/etc/passwd")" = 1 ] && [ "$(grep -c '^da3-edge:' "$ROOT/etc/group")" = 1 ] || return 1
        gid=$(grep '^da3-edge:' "$ROOT/etc/group" | cut -d: -f3)
        [ "$(grep -cE "^da3-edge-[a-z]+:[^:]*:[0-9]+:$gid:" "$ROOT/etc/passwd")" = 2 ]
    }
    model_files() { (cd "$ROOT/opt/da3-edge/models" && ls -A | sort | tr '\n' ' '); }
    # What the service user can write among the places root's installer writes (the
    # daemon's own /var/lib/da3-edge aside): nothing, or root would work by a path that
    # process controls (swap a staging folder for a link, plant one where root writes).
    service_writable() {
        # find's status says some folder was unreadable to it (root's 0700 caches): not the question.
        { as_daemon find /opt/da3-edge /etc/da3-edge /etc/systemd/system /usr/local/bin \
            /var/cache/da3-edge /var/log /var/lib -xdev -path /var/lib/da3-edge -prune \
            -o -writable -print 2>/dev/null || true; } | tr '\n' ' '
    }
    # Plants by the service user (as_daemon): every link it can make where the installer
    # works, naming $1 (a victim root owns); prints where it could.
    plant() {
        as_daemon python3 - "$1" <<'PY'
import os, sys
made = []
for d in ("/var/lib/da3-edge", "/var/lib/da3-edge/models", "/opt/da3-edge", "/opt/da3-edge/models"):
    names = [".tar-sha256"] + [f".models-old.{pid}" for pid in range(1, 1 << 15)]
    for name in names:
        path = os.path.join(d, name)
        try:
            if os.path.islink(path):
                os.unlink(path)  # planted before, naming the other victim
            os.symlink(sys.argv[1], path)
        except OSError:
            break  # not the service user's to write in
    else:
        made.append(d)
print(" ".join(made))
PY
    }

    # The Pi's owner, as Imager makes it (a regular account, uid 1000), before anything.
    in_root useradd --create-home --uid 1000 --shell /bin/bash pi
    whole_tree >"$WORK/before.tree"

    # 1. A fresh install from the wheel, models from a directory.
    install_run run1 --from "/mnt/dist/$WHEEL" --models /mnt/models \
        || die "the first install failed (above)"
    ok "first install: exit 0"
    check "users da3-edge (and its group), da3-edge-serve and da3-edge-publish in it, once each" count_users
    enabled=$(in_root systemctl is-enabled da3-edge 2>&1 || true)
    check "systemctl is-enabled da3-edge: '$enabled'" test "$enabled" = enabled
    enabled=$(in_root systemctl is-enabled da3-edge-serve 2>&1 || true)
    check "systemctl is-enabled da3-edge-serve: '$enabled'" test "$enabled" = enabled
    enabled=$(in_root systemctl is-enabled da3-edge-publish 2>&1 || true)
    check "da3-edge-publish installed, not enabled: '$enabled'" test "$enabled" = disabled \
        -a -f "$ROOT/etc/systemd/system/da3-edge-publish.service"
    check "service not started (no systemd running here)" grep -q "systemd is not running here" "$WORK/run1.out"
    check "config written from --print-default-config" grep -q '^source = "picamera2"' "$ROOT/etc/da3-edge/da3-edge.toml"
    check "unit and systemd/README.md in place" test -f "$ROOT/etc/systemd/system/da3-edge.service" \
        -a -f "$ROOT/opt/da3-edge/systemd/README.md"
    check "models verified before they went live" grep -q "  ok$" "$WORK/run1.out"
    check "models are root's: $(in_root stat -c '%U %a' /opt/da3-edge/models /opt/da3-edge/models/manifest.json | tr '\n' ' ')" \
        test "$(in_root stat -c '%U %a' /opt/da3-edge/models /opt/da3-edge/models/manifest.json | tr '\n' ' ')" = "root 755 root 644 "
    # The daemon's state directory, as systemd's StateDirectory= makes it at the first start.
    in_root install -d -o da3-edge -g da3-edge -m 0755 /var/lib/da3-edge
    writable=$(service_writable)
    check "the service user can write nothing where the installer writes${writable:+: $writable}" test -z "$writable"
    check "the owner (pi) is in group da3-edge (reads /run/da3-edge)" \
        grep -Eq '^da3-edge:[^:]*:[0-9]+:(.*,)?pi(,.*)?$' "$ROOT/etc/group"
    as_owner() { in_root runuser -u pi -- /usr/bin/env PATH=/usr/local/bin:/usr/bin:/bin "$@"; }
    owner_models=$(as_owner da3-edge models 2>&1 || true)
    check "da3-edge on the owner's PATH lists the service's models: '$(echo "$owner_models" | head -n 1)'" \
        test "$(echo "$owner_models" | head -n 1)" = "/opt/da3-edge/models (da3-small)"
    deb_numpy=$(in_root dpkg-query -W -f='${Version}' python3-numpy 2>/dev/null || true)
    [ -n "$deb_numpy" ] || deb_numpy=$(in_root apt-cache policy python3-numpy | awk '/Candidate:/ {print $2}')
    deb_numpy=${deb_numpy#*:}
    venv_numpy=$(in_root /opt/da3-edge/venv/bin/python -c 'import numpy; print(numpy.__version__)')
    check "venv numpy $venv_numpy has the major version of Debian's python3-numpy $deb_numpy" \
        test "${venv_numpy%%.*}" = "${deb_numpy%%.*}"
    echo "--- da3-edge doctor (as da3-edge)"
    set +e
    as_daemon /opt/da3-edge/venv/bin/da3-edge doctor >"$WORK/doctor.out" 2>&1
    rc=$?
    set -e
    sed 's/^/  | /' "$WORK/doctor.out"
    check "da3-edge doctor: exit $rc, ready" test $rc = 0
    check "ExecuTorch runner built on the device and usable by da3-edge (doctor)" \
        grep -Eq "ok +executorch +the ExecuTorch stages can run: runner for executorch" "$WORK/doctor.out"
    check "doctor: the default stages (auto) run the ExecuTorch programs" \
        grep -Eq "ok +stages +auto runs executorch" "$WORK/doctor.out"
    # fp32: emulated fp16 arithmetic (the config's fp16 on a Cortex-A76) takes a minute a frame.
    echo "--- da3-edge run --source fake --precision fp32 --max-frames 2 (as da3-edge, the installed config)"
    set +e
    as_daemon /opt/da3-edge/venv/bin/da3-edge run --config /etc/da3-edge/da3-edge.toml \
        --source fake --precision fp32 --store /tmp/installer-check-store --max-frames 2 >"$WORK/run.out" 2>&1
    rc=$?
    set -e
    sed 's/^/  | /' "$WORK/run.out" | tail -n 4
    check "the installed daemon wrote frames: exit $rc" \
        test $rc = 0 -a -f "$ROOT/tmp/installer-check-store/latest/frame.json"
    check "the installed daemon runs the ExecuTorch stages by default (its log)" \
        grep -q "stages: executorch (auto: " "$WORK/run.out"
    rm -rf "$ROOT/tmp/installer-check-store"

    # 2. The same install again, after a user edit to the config: nothing may change.
    # And a link the service user left in its state directory: root's chown of that
    # directory must not follow it to the file it names.
    sed -i 's/^keep_frames = 100$/keep_frames = 50  # edited by installer-check/' "$ROOT/etc/da3-edge/da3-edge.toml"
    as_daemon ln -s /etc/shadow /var/lib/da3-edge/planted-link
    snapshot >"$WORK/before2.snap"
    install_run run2 --from "/mnt/dist/$WHEEL" --models /mnt/models || bad "second install: exit non-zero"
    snapshot >"$WORK/after2.snap"
    check "second install changed nothing ($(wc -l <"$WORK/after2.snap") entries compared)" same_snapshot before2 after2
    check "second install kept the edited config" grep -q 'edited by installer-check' "$ROOT/etc/da3-edge/da3-edge.toml"
    check "a link the service user planted was not followed: /etc/shadow still $(stat -c %U:%G "$ROOT/etc/shadow")" \
        test "$(stat -c %u "$ROOT/etc/shadow")" = 0
    check "second install: no apt installs, no downloads, no package installs" \
        grep_not 'Setting up |Unpacking |Download|Installed [0-9]+ package|^ \+ |installed uv' "$WORK/run2.out" "$WORK/run2.err"
    check "second install: program and models reported unchanged" \
        grep -q "unchanged: $WHEEL is installed" "$WORK/run2.out"
    check "second install: models reported unchanged" \
        grep -q "unchanged: same files as /mnt/models" "$WORK/run2.out"
    check "the users still exist once each" count_users

    # 3. From the checkout (the default for a git clone on the Pi), run in it as a user
    # does (`sudo scripts/install-pi.sh`): the checkout's pyproject.toml must not reach uv.
    # The same code, so unchanged.
    RUN_IN=/src install_run run3 --models /mnt/models || bad "install from the checkout, run in it: exit non-zero"
    snapshot >"$WORK/after3.snap"
    check "install from the checkout builds the same wheel: reported unchanged" \
        grep -q "unchanged: $WHEEL is installed" "$WORK/run3.out"
    check "install from the checkout changed nothing" same_snapshot after2 after3

    # 3b. The LAN view (a card made with `da3-edge card --view lan`): the login, only
    # serve's to read, and the drop-in that lets the LAN's peers in; again: no change.
    printf 'viewer:scrypt$16384$8$1$c2FsdHNhbHRzYWx0c2FsdA$a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U\n' \
        >"$WORK/url/serve-users"
    install_run run3b --from "/mnt/dist/$WHEEL" --models /mnt/models \
        --serve-users /mnt/url/serve-users || bad "--serve-users: exit non-zero"
    users_mode=$(in_root stat -c '%a %U:%G' /etc/da3-edge/serve-users)  # the root's names
    check "--serve-users: /etc/da3-edge/serve-users is da3-edge-serve's, 0600: $users_mode" \
        test "$users_mode" = "600 da3-edge-serve:da3-edge"
    check "--serve-users: serve's LAN drop-in installed" \
        cmp -s "$SNAP/systemd/serve-lan.conf" "$ROOT/etc/systemd/system/da3-edge-serve.service.d/lan.conf"
    snapshot >"$WORK/after3b.snap"
    install_run run3c --from "/mnt/dist/$WHEEL" --models /mnt/models \
        --serve-users /mnt/url/serve-users || bad "--serve-users again: exit non-zero"
    snapshot >"$WORK/after3c.snap"
    check "--serve-users again: nothing changed" same_snapshot after3b after3c
    check "--serve-users with the config on loopback: the last line says the page is on this machine" \
        grep -q "Live view: http://127.0.0.1:8000/ on this machine" "$WORK/run3c.out"

    # 3d. The service user plants links where root's installer wrote before (the pack's
    # hash file, the old models' parking place for every PID) to a file and a folder of
    # root's, then a --models-url of the same files and one of new files: neither victim
    # may change, and the models must land where they belong.
    mkdir -p "$ROOT/root/victim-dir"
    printf 'secret\n' >"$ROOT/root/victim-file"
    chmod 0600 "$ROOT/root/victim-file"
    planted=$(plant /root/victim-file)
    install_run run3d --from "/mnt/dist/$WHEEL" --models-url file:///mnt/url/same.tar.gz \
        --models-sha256 "$SAME_SHA" || bad "--models-url of the installed files: exit non-zero"
    check "links planted by the service user (in: ${planted:-nowhere root works}): root's file not written" \
        test "$(cat "$ROOT/root/victim-file")" = secret -a "$(stat -c %a "$ROOT/root/victim-file")" = 600
    planted=$(plant /root/victim-dir)
    # The service user's own code in its user site (its home is its state folder): a .pth
    # the installer's service-user steps (run4 verifies new models as that user) and the
    # units must never run.
    site=$(as_daemon python3 -c 'import site; print(site.getusersitepackages())')
    as_daemon mkdir -p "$site"
    printf 'import os; open("/tmp/pth-ran", "a").write("uid %%d\\n" %% os.getuid())\n' \
        | as_daemon tee "$site/planted.pth" >/dev/null
    as_daemon python3 -c 'pass'   # the plant works: a plain Python of the user runs it
    check "a .pth in the service user's user site runs in its plain Python" test -e "$ROOT/tmp/pth-ran"
    rm -f "$ROOT/tmp/pth-ran"
    # 4. Models from a URL with the right SHA-256 (a different set: int8 only).
    install_run run4 --from "/mnt/dist/$WHEEL" --models-url file:///mnt/url/models.tar.gz \
        --models-sha256 "$URL_SHA" || bad "--models-url: exit non-zero"
    check "the service user's .pth never ran in the installer's steps as that user$(cat "$ROOT/tmp/pth-ran" 2>/dev/null | tr '\n' ' ')" \
        test ! -e "$ROOT/tmp/pth-ran"
    check "models were verified as the service user in that run" grep -q "  ok$" "$WORK/run4.out"
    check "--models-url: SHA-256 checked" grep -q "SHA-256 ok" "$WORK/run4.out"
    expected=$( (cd "$WORK/url/src/da3-edge-models" && ls -A && echo .tar-sha256) | sort | tr '\n' ' ')
    check "--models-url: models replaced by exactly the archive's files ($(model_files))" \
        test "$(model_files)" = "$expected"
    check "--models-url: da3-edge models lists the new set" grep -q "int8" "$WORK/run4.out"
    victims=$(ls -A "$ROOT/root/victim-dir")
    check "links planted by the service user (in: ${planted:-nowhere root works}): the old models not moved into root's folder${victims:+: $victims}" \
        test -z "$victims"
    snapshot >"$WORK/after4.snap"
    # Run from a folder holding modules of the standard library's names and picamera2's
    # (a shared download folder): root's Pythons must import none of them.
    mkdir -p "$ROOT/tmp/planted"
    for m in zipfile tarfile picamera2 hashlib json; do
        printf 'open("/tmp/planted-ran", "a").write("%s\\n")\n' "$m" >"$ROOT/tmp/planted/$m.py"
    done
    RUN_IN=/tmp/planted install_run run5 --from "/mnt/dist/$WHEEL" --models-url file:///mnt/url/models.tar.gz \
        --models-sha256 "$URL_SHA" || bad "--models-url again: exit non-zero"
    check "run from a folder of planted modules: none imported$(cat "$ROOT/tmp/planted-ran" 2>/dev/null | tr '\n' ' ')" \
        test ! -e "$ROOT/tmp/planted-ran"
    rm -rf "$ROOT/tmp/planted"
    snapshot >"$WORK/after5.snap"
    check "--models-url again: not downloaded again" grep -q "unchanged: /opt/da3-edge/models already holds" "$WORK/run5.out"
    check "--models-url again: nothing changed" same_snapshot after4 after5

    # 5. A wrong SHA-256: refused with one line, nothing changed, nothing left behind.
    wrong=$(printf 'not the archive' | sha256sum | cut -d' ' -f1)
    if install_run run6 --from "/mnt/dist/$WHEEL" --models-url file:///mnt/url/models.tar.gz \
        --models-sha256 "$wrong"; then
        bad "wrong SHA-256: accepted"
    else
        ok "wrong SHA-256: refused (non-zero exit)"
    fi
    snapshot >"$WORK/after6.snap"
    check "wrong SHA-256: one error line on stderr (after the progress lines), naming the mismatch" \
        test "$(grep -vc '^download: ' "$WORK/run6.err")" = 1 -a -n "$(grep "expected $wrong: not the pack asked for" "$WORK/run6.err")"
    check "wrong SHA-256: nothing changed" same_snapshot after5 after6
    leftovers=$(cd "$ROOT" && ls -d tmp/da3-edge-install.* opt/da3-edge/.models-* var/lib/.da3-edge-models.* 2>/dev/null || true)
    check "no temporary files left behind${leftovers:+: $leftovers}" test -z "$leftovers"

    # 5b. Models where older installs kept them, in the service user's directory, with a
    # link it planted among them: moved to root's place, the link dropped (root's file
    # not copied into the models), the service's copy gone.
    before_files=$(model_files)
    mv "$ROOT/opt/da3-edge/models" "$ROOT/var/lib/da3-edge/models"
    in_root chown -R da3-edge:da3-edge /var/lib/da3-edge/models
    as_daemon ln -s /root/victim-file /var/lib/da3-edge/models/extra.tflite
    # A process of the service user's working inside that folder plants a new link to
    # root's file there every few milliseconds while the installer runs (a rename moves
    # the folder, and the working directory with it): none may be copied.
    rm -f "$ROOT/tmp/stop-racer"
    as_daemon bash -c 'cd /var/lib/da3-edge/models || exit 1; i=0
        while [ ! -e /tmp/stop-racer ]; do
            i=$((i + 1)); ln -s /root/victim-file "racer$i.tflite" 2>/dev/null; sleep 0.01
        done; echo "$i" >/tmp/racer-rounds' &
    racer=$!
    install_run run6b --from "/mnt/dist/$WHEEL" || bad "models of an older install: exit non-zero"
    : >"$ROOT/tmp/stop-racer"
    wait "$racer" || true
    check "models of an older install: a racer planted links all along ($(cat "$ROOT/tmp/racer-rounds" 2>/dev/null) rounds)" \
        test -s "$ROOT/tmp/racer-rounds"
    rm -f "$ROOT/tmp/stop-racer" "$ROOT/tmp/racer-rounds"
    check "models of an older install: moved to /opt/da3-edge/models ($(model_files))" \
        test "$(model_files)" = "$(echo "$before_files" | sed 's/\.tar-sha256 //')" -a ! -e "$ROOT/var/lib/da3-edge/models"
    check "models of an older install: no file of the models holds root's file" \
        test -z "$(grep -rlx secret "$ROOT/opt/da3-edge/models" 2>/dev/null)"
    check "models of an older install: the planted link dropped, root's" \
        grep -q "dropped (not a plain file): .*extra.tflite" "$WORK/run6b.out"
    writable=$(service_writable)
    check "models of an older install: the service user can write nothing where the installer writes${writable:+: $writable}" test -z "$writable"

    # 5c. A first boot cut short (the plug pulled): dpkg left a package unpacked and not
    # configured, and the venv half made (no pip). The next run finishes both.
    in_root sh -c 'cd /tmp && apt-get download -q hello >/dev/null && dpkg --unpack /tmp/hello_*.deb >/dev/null'
    rm -f "$ROOT"/tmp/hello_*.deb
    rm -rf "$ROOT"/opt/da3-edge/venv/lib/python3*/site-packages/pip
    install_run run6c --from "/mnt/dist/$WHEEL" || bad "after a cut-short install: exit non-zero"
    configured() { grep -q "dpkg was interrupted: dpkg --configure -a" "$WORK/run6c.out" && [ -z "$(in_root dpkg --audit)" ]; }
    check "a package dpkg left unpacked: configured first ($(in_root dpkg-query -W -f='${Status}' hello))" configured
    remade() {
        grep -q "created /opt/da3-edge/venvs/.* with --system-site-packages" "$WORK/run6c.out" \
            && grep -q "removed /opt/da3-edge/venvs/.* (neither in service nor the one before)" "$WORK/run6c.out"
    }
    check "a venv cut short (no pip): a new one made beside it, and it removed" remade
    in_root dpkg --purge hello >/dev/null
    venv_now() { readlink "$ROOT/opt/da3-edge/venv"; }
    venv_state() { echo "$(venv_now) $(ls "$ROOT/opt/da3-edge/venvs" | tr '\n' ' ')$(in_root /opt/da3-edge/venv/bin/da3-edge --version 2>&1)"; }

    # 5d. A run that fails after it replaced the models (here: at the config step, a
    # config refused) puts them back: models and config as before, byte for byte.
    kept() { (cd "$ROOT/etc/da3-edge" && sha256sum da3-edge.toml; cd "$ROOT/opt/da3-edge/models" && sha256sum ./*); }
    other=$ROOT/tmp/models-other
    mkdir -p "$other"
    cp "$ROOT"/opt/da3-edge/models/*.tflite "$ROOT"/opt/da3-edge/models/*.pte "$other/"
    python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=1)' \
        "$ROOT/opt/da3-edge/models/manifest.json" "$other/manifest.json"
    printf '[model]\nsize = 9999\n' >"$ROOT/tmp/refused.toml"
    kept >"$WORK/kept.6d"
    if install_run run6d --from "/mnt/dist/$WHEEL" --models /tmp/models-other --config /tmp/refused.toml; then
        bad "a config refused after new models: accepted"
    else
        put_back_seen() {
            grep -q "^install-pi.sh: the models before this run are back in /opt/da3-edge/models$" "$WORK/run6d.err" \
                && grep -qx '    installed' "$WORK/run6d.out" \
                && [ "$(tail -n 1 "$WORK/run6d.err" | cut -c1-21)" = "install-pi.sh: error:" ]
        }
        check "a run that fails after it replaced the models says it put them back, and ends on its error" put_back_seen
        check "... and the models and config are as before (SHA-256)" cmp -s "$WORK/kept.6d" <(kept)
    fi
    rm -rf "$other" "$ROOT/tmp/refused.toml"

    # 6. The ExecuTorch runner cannot be built (here: a compiler that fails): the install
    # ends with --require-executorch, and finishes without it, saying so in one line;
    # doctor then says why and how to retry. A normal run builds it again.
    et_dir=/opt/da3-edge/venv/share/da3-edge/executorch-1.5.1
    rm -rf "$ROOT$et_dir"
    if RUN_ENV=CXX=/bin/false install_run run7 --from "/mnt/dist/$WHEEL" --models /mnt/models --require-executorch; then
        bad "--require-executorch with a failing compiler: accepted"
    else
        check "--require-executorch with a failing compiler: refused, naming install-executorch" \
            grep -q "install-pi.sh: error: install-executorch failed: " "$WORK/run7.err"
    fi
    RUN_ENV=CXX=/bin/false install_run run8 --from "/mnt/dist/$WHEEL" --models /mnt/models \
        || bad "a failing compiler without --require-executorch: exit non-zero"
    warning=$(grep -c "^install-pi.sh: warning: ExecuTorch runner not built (building the ExecuTorch runner failed (/bin/false)" "$WORK/run8.err" || true)
    check "a failing compiler: the install finishes with one warning line" test "$warning" = 1
    set +e
    as_daemon /opt/da3-edge/venv/bin/da3-edge doctor >"$WORK/doctor8.out" 2>&1
    set -e
    sed 's/^/  | /' "$WORK/doctor8.out" | grep executorch || true
    check "doctor says why the runner is missing and how to retry" \
        grep -q "the last \`da3-edge install-executorch\` failed (building the ExecuTorch runner failed (/bin/false)" "$WORK/doctor8.out"
    check "doctor: without the runner the default stages (auto) are numpy, saying why" \
        grep -q "auto runs numpy (auto: the executorch stages need" "$WORK/doctor8.out"
    install_run run9 --from "/mnt/dist/$WHEEL" --models /mnt/models || bad "the runner built again: exit non-zero"
    check "the runner built again by the next install" test -f "$ROOT$et_dir/runner.so" \
        -a ! -e "$ROOT$et_dir.failed"

    # 6c. A new version whose own doctor finds a blocking problem (here: shown a Pi 4's
    # CPU, whose lack of LSE atomics LiteRT cannot run on) is not switched to: one line
    # why, the venv in service and its version as they were, the new venv gone.
    if [ "$(uname -m)" != aarch64 ]; then
        before=$(venv_state)
        mount --bind "$SNAP/scripts/arm/cpuinfo-pi4.txt" "$ROOT/proc/cpuinfo"
        if install_run run9b --from "/mnt/dist/next/$NEXT"; then
            bad "a new version whose doctor fails: switched to"
        else
            refused() {
                tail -n 1 "$WORK/run9b.err" | grep -q "^install-pi.sh: error: the new da3-edge's doctor found a blocking problem (litert: ai-edge-litert .*lacks Armv8.1 atomics.*): not switched, .* stays in service$"
            }
            check "a new version whose doctor fails: refused in one line naming the problem" refused
            check "... the venv in service, its version and the venvs as before ($before)" test "$(venv_state)" = "$before"
        fi
        umount "$ROOT/proc/cpuinfo"
    fi

    # 6d. A new version beside the one in service: a venv of its own, the link switched,
    # the one before kept as venv-before; config and models untouched. Back to the first
    # wheel: a third venv, and the oldest goes (two kept).
    # First as an install made before venvs/ left it: the venv a folder in place.
    in_root sh -c 'cd /opt/da3-edge && t=$(readlink venv) && rm -f venv venv-before && mv "$t" venv'
    kept >"$WORK/kept.before"
    install_run run10 --from "/mnt/dist/next/$NEXT" || bad "the next version: exit non-zero"
    first=$(readlink "$ROOT/opt/da3-edge/venv-before")
    check "the next version in a venv of its own: venv -> $(venv_now), the older install's folder moved to venv-before -> $first" \
        test -L "$ROOT/opt/da3-edge/venv" -a "${first%-before}" != "$first" -a -x "$ROOT/opt/da3-edge/$first/bin/python"
    version=$(in_root /opt/da3-edge/venv/bin/da3-edge --version 2>&1 || true)
    check "the venv in service runs it: '$version'" test "$version" = "da3-edge $NEXT_VERSION"
    carried() {
        grep -q "uv .* copied from /opt/da3-edge/venv" "$WORK/run10.out" \
            && grep -q "unchanged: /opt/da3-edge/venvs/.*/share/da3-edge/executorch-" "$WORK/run10.out"
    }
    check "its uv and ExecuTorch runner carried over from the venv in service (not fetched or built)" carried
    kept >"$WORK/kept.after"
    check "config and models unchanged (SHA-256)" cmp -s "$WORK/kept.before" "$WORK/kept.after"
    second=$(venv_now)
    venv_files() { (cd "$ROOT/opt/da3-edge/$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
    venv_files "$second" >"$WORK/second.before"
    install_run run11 --from "/mnt/dist/$WHEEL" || bad "back to the first wheel: exit non-zero"
    check "back to the first wheel: a third venv, two kept: $(ls "$ROOT/opt/da3-edge/venvs" | tr '\n' ' ')" \
        test "$(ls "$ROOT/opt/da3-edge/venvs" | wc -l)" = 2 -a ! -e "$ROOT/opt/da3-edge/$first" \
        -a "$(readlink "$ROOT/opt/da3-edge/venv-before")" = "$second"
    # The new venv starts as hard links of the one in service: only da3-edge installed and
    # compiled, the one in service unchanged by it, the packages' commands its own.
    seeded() {  # uv compiled once: da3-edge's files, none of the packages'
        grep -q "packages of /opt/da3-edge/$second linked in" "$WORK/run11.out" \
            && [ "$(grep -c '^Bytecode compiled' "$WORK/run11.err")" = 1 ]
    }
    check "the third venv's packages linked from the second's ($(grep -o 'Bytecode compiled [0-9]* files' "$WORK/run11.err" | tr '\n' ' '))" seeded
    venv_files "$second" >"$WORK/second.after"
    check "the venv it was linked from: every file as it was (SHA-256)" cmp -s "$WORK/second.before" "$WORK/second.after"
    uvicorn=$(in_root /opt/da3-edge/venv/bin/uvicorn --version 2>&1 || true)
    own_command() {
        [ "$(head -n 1 "$ROOT/opt/da3-edge/venv/bin/uvicorn")" = "#!/opt/da3-edge/$(venv_now)/bin/python" ] \
            && [ "${uvicorn#Running uvicorn}" != "$uvicorn" ]
    }
    check "a package's command in it runs on its own python: uvicorn --version: ${uvicorn:0:60}" own_command

    # 6e. The update kill list (docs/reliability.md, "Updates"): an update with other
    # models and config (and from the switch on, the next version), killed (SIGKILL: a
    # power cut) at each of its commit points; then what the boot runs (install-pi.sh --recover, the unit
    # da3-edge-finish-update's command). The version in service is the one before or
    # the new one, whole: its venv, its models, its config. SIGHUP (a dropped SSH
    # session) is ignored: the update finishes. (No systemd runs here: the READY wait
    # and a rollback's kill are the VM's.)
    in_service() {  # the version in service and the SHA-256 of its models and config
        in_root /opt/da3-edge/venv/bin/da3-edge --version 2>&1
        (cd "$ROOT/opt/da3-edge/models" && sha256sum manifest.json ./*.tflite)
        sha256sum <"$ROOT/etc/da3-edge/da3-edge.toml"
    }
    mkdir -p "$ROOT/tmp/set-a" "$ROOT/tmp/set-b"
    cp "$ROOT"/opt/da3-edge/models/* "$ROOT/etc/da3-edge/da3-edge.toml" "$ROOT/tmp/set-a/"
    cp "$ROOT"/opt/da3-edge/models/*.tflite "$ROOT"/opt/da3-edge/models/*.pte "$ROOT/tmp/set-b/"
    python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=2)' \
        "$ROOT/opt/da3-edge/models/manifest.json" "$ROOT/tmp/set-b/manifest.json"
    { cat "$ROOT/etc/da3-edge/da3-edge.toml"; echo "# set b"; } >"$ROOT/tmp/set-b/da3-edge.toml"
    printf 'stray\n' >"$ROOT/tmp/set-b/stray.tflite"  # in the folder, not in its manifest
    in_service >"$WORK/set-a.state"
    settled() {  # settled NAME EXPECTED: --recover ran, nothing of the update left, EXPECTED in service
        install_run "$1-boot" --recover || return 1
        [ ! -e "$ROOT/opt/da3-edge/.update" ] || return 1
        [ -z "$(cd "$ROOT" && ls -d opt/da3-edge/.models-old.* 2>/dev/null)" ] || return 1
        in_service | cmp -s - "$2" || { in_service | diff - "$2" | head -n 8; return 1; }
        as_daemon /opt/da3-edge/venv/bin/da3-edge run --config /etc/da3-edge/da3-edge.toml --check-config >/dev/null
    }
    # Before the switch the same program will do (no venv to make: a third of the time).
    for point in record models-out units switch; do
        wheel=/mnt/dist/$WHEEL
        [ $point != switch ] || wheel=/mnt/dist/next/$NEXT
        RUN_ENV=DA3_EDGE_INSTALL_KILL_AT=$point install_run "kill-$point" \
            --from "$wheel" --models /tmp/set-b --config /tmp/set-b/da3-edge.toml || rc=$?
        check "update killed after '$point': killed there (exit ${rc:-0}), the record left" \
            test "${rc:-0}" = 137 -a -d "$ROOT/opt/da3-edge/.update"
        check "... at boot: rolled back, the version before in service with its models and config" \
            settled "kill-$point" "$WORK/set-a.state"
        unset rc
    done
    RUN_ENV=DA3_EDGE_INSTALL_KILL_AT=switch:hup install_run hup-switch \
        --from "/mnt/dist/next/$NEXT" --models /tmp/set-b --config /tmp/set-b/da3-edge.toml \
        || bad "update sent SIGHUP at the switch: exit non-zero"
    in_service >"$WORK/set-b.state"
    check "update sent SIGHUP at the switch: finished ($(head -n 1 "$WORK/set-b.state")), the record gone" \
        test "$(head -n 1 "$WORK/set-b.state")" = "da3-edge $NEXT_VERSION" -a ! -e "$ROOT/opt/da3-edge/.update"
    check "update: a file the models' manifest does not list was not copied, and said so" \
        grep -q "not in its manifest, not copied: stray.tflite" "$WORK/hup-switch.out"
    check "... nor is it in the models in service" test ! -e "$ROOT/opt/da3-edge/models/stray.tflite"
    RUN_ENV=DA3_EDGE_INSTALL_KILL_AT=up install_run kill-up \
        --from "/mnt/dist/$WHEEL" --models /tmp/set-a --config /tmp/set-a/da3-edge.toml || rc=$?
    check "update back, killed once it stood ('up', exit ${rc:-0}): the record left" \
        test "${rc:-0}" = 137 -a -d "$ROOT/opt/da3-edge/.update"
    unset rc
    check "... at boot: finished, the new version in service with its models and config" \
        settled kill-up "$WORK/set-a.state"
    rm -rf "$ROOT/tmp/set-a" "$ROOT/tmp/set-b"

    # 6f. The Pi builds its own models (--build-models DIR, as first boot does with the
    # card's release or the hub's): the cores a config with a 640x480 camera at
    # model.size 56 runs (42x56 fp16), byte for byte the x86_64 build's, installed beside
    # the cores of the same release already there, verified on the device (the forward
    # check included: the release is kept where the service user reads it), the step's
    # time shown.
    if [ -f "$WORK/release/model.safetensors" ]; then
        mkdir -p "$ROOT/tmp/build"
        printf '[camera]\nsource = "fake"\nwidth = 640\nheight = 480\n[model]\nsize = 56\n' \
            >"$ROOT/tmp/build/pi.toml"
        install_run build1 --from "/mnt/dist/$WHEEL" --build-models /mnt/release \
            --config /tmp/build/pi.toml || bad "--build-models: exit non-zero"
        built=$(cd "$ROOT/opt/da3-edge/models" && ls ./*.tflite | tr '\n' ' ')
        check "--build-models: the config's core built and installed (beside: $built)" \
            grep -q '"file": "da3-small_42x56_fp16.tflite"' "$ROOT/opt/da3-edge/models/manifest.json"
        check "... byte for byte the x86_64 build's" \
            cmp -s "$ROOT/opt/da3-edge/models/da3-small_42x56_fp16.tflite" "$WORK/built-x86/da3-small_42x56_fp16.tflite"
        check "... the step and its time in the log" \
            grep -qE "^==> models: built from DA3's release \(at [0-9]+ s\)$" "$WORK/build1.out"
        check "... verified on the device against numpy's DA3 (the release kept: $(ls "$ROOT/var/cache/da3-edge/release" | tr '\n' ' '))" \
            grep -qE "forward 42x56 fp16 +Pearson .* ok$" "$WORK/build1.out"
        rm -rf "$ROOT/tmp/build"
    else
        bad "--build-models: no release given (installer-check.sh ROOTFS_TAR MODELS_DIR RELEASE_DIR)"
    fi

    # 7. The numpy question (docs/how-to/raspberry-pi.md): an apt-built numpy extension
    # (python3-pywt: Cython against Debian's numpy, as picamera2's simplejpeg is) must
    # import in the installed venv. numpy 2.x over a Debian numpy 1.x breaks it with
    # "numpy.dtype size changed"; this is not part of the install, so after the snapshots.
    echo "--- apt-get install python3-pywt; import it in /opt/da3-edge/venv"
    if in_root apt-get install -y -q --no-install-recommends python3-pywt >"$WORK/pywt.out" 2>&1; then
        set +e
        in_root /opt/da3-edge/venv/bin/python -c 'import numpy, pywt; print("numpy", numpy.__version__, "pywt", pywt.__version__)' >"$WORK/pywt-import.out" 2>&1
        rc=$?
        set -e
        sed 's/^/  | /' "$WORK/pywt-import.out" | tail -n 3
        check "Debian's python3-pywt (built against Debian's numpy) imports in the venv" test $rc = 0
    else
        tail -n 3 "$WORK/pywt.out"
        bad "apt-get install python3-pywt"
    fi

    # 8. --uninstall keeps the config and the models; --purge then leaves nothing of
    # da3-edge: the whole tree as before the first install, apt's packages and logs aside.
    install_run uninstall --uninstall || bad "--uninstall: exit non-zero"
    check "--uninstall: units and venv gone, /opt/da3-edge holds the models only: $(ls -A "$ROOT/opt/da3-edge" | tr '\n' ' ')" \
        test "$(ls -A "$ROOT/opt/da3-edge")" = models -a ! -e "$ROOT/etc/systemd/system/da3-edge.service" \
        -a ! -e "$ROOT/etc/systemd/system/multi-user.target.wants/da3-edge.service"
    check "--uninstall: config and models kept" test -f "$ROOT/etc/da3-edge/da3-edge.toml" \
        -a -f "$ROOT/opt/da3-edge/models/manifest.json"
    install_run purge --uninstall --purge || bad "--uninstall --purge: exit non-zero"
    whole_tree >"$WORK/purged.tree"
    python3 "$SNAP/scripts/arm/tree_diff.py" leftovers "$WORK/before.tree" "$WORK/purged.tree" \
        >"$WORK/leftovers.txt"
    head -n 40 "$WORK/leftovers.txt" | sed 's/^/  | /'
    check "--purge: no file or account of da3-edge left, none in root's caches" \
        test ! -s "$WORK/leftovers.txt"
    check "--purge: no account of da3-edge's left" \
        grep_not '^da3-edge' "$ROOT"/etc/passwd "$ROOT"/etc/group "$ROOT"/etc/shadow "$ROOT"/etc/gshadow
    # The same again on this system, now with the apt packages in place: install from
    # the checkout, purge, and the whole tree is exactly as it was before the install.
    RUN_IN=/src install_run again --models /mnt/models || bad "install after a purge: exit non-zero"
    install_run purge2 --uninstall --purge || bad "--uninstall --purge again: exit non-zero"
    whole_tree >"$WORK/purged2.tree"
    python3 "$SNAP/scripts/arm/tree_diff.py" diff "$WORK/purged.tree" "$WORK/purged2.tree" \
        >"$WORK/purge.diff"
    head -n 40 "$WORK/purge.diff" | sed 's/^/  | /'
    check "install then --uninstall --purge: the tree as before the install ($(wc -l <"$WORK/purged2.tree") paths compared)" \
        test ! -s "$WORK/purge.diff"

    echo "=== $CHECKS checks, $FAILED failed"
    [ "$FAILED" = 0 ]
    exit
fi

# ------------------------------------------------------------------ outside: set up, clean up
[ $# -eq 2 ] || [ $# -eq 3 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROOTFS_TAR=$1
MODELS_SRC=$(cd "$2" 2>/dev/null && pwd) || die "$2: no such directory"
RELEASE_SRC=""
if [ $# -eq 3 ]; then
    RELEASE_SRC=$(cd "$3" 2>/dev/null && pwd) || die "$3: no such directory"
    [ -f "$RELEASE_SRC/model.safetensors" ] || die "$RELEASE_SRC: no model.safetensors (not a release)"
fi
[ -f "$ROOTFS_TAR" ] || die "$ROOTFS_TAR: no such file"
[ -f "$MODELS_SRC/manifest.json" ] || die "$MODELS_SRC: no manifest.json (not a model directory)"
[ "$(id -u)" -eq 0 ] || die "needs root (chroot, mounts)"
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for tool in unshare chroot uv findmnt; do command -v $tool >/dev/null || die "$tool not found"; done

if [ "$(uname -m)" != aarch64 ]; then
    binfmt=/proc/sys/fs/binfmt_misc
    [ -e $binfmt/register ] || mount -t binfmt_misc binfmt_misc $binfmt
    if [ ! -e $binfmt/qemu-aarch64 ]; then
        [ -x /usr/bin/qemu-aarch64-static ] || die "no qemu-aarch64-static (apt install qemu-user-static)"
        conf=/usr/lib/binfmt.d/qemu-aarch64.conf
        [ -f $conf ] || die "$conf missing: cannot register qemu-aarch64"
        # The same magic and mask, the static interpreter, flag F (opened now, usable in a chroot).
        IFS=: read -r _ name type offset magic mask _ _ <"$conf"
        echo ":$name:$type:$offset:$magic:$mask:/usr/bin/qemu-aarch64-static:F" >$binfmt/register
        echo "registered qemu-aarch64-static with binfmt_misc (flag F)"
    fi
    grep -q '^enabled' $binfmt/qemu-aarch64 || die "binfmt qemu-aarch64 is disabled"
    grep -q '^flags:.*F' $binfmt/qemu-aarch64 \
        || die "binfmt qemu-aarch64 lacks flag F: the interpreter is not reachable inside a chroot"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/installer-check.XXXXXX")
cleanup() {
    # Mounts live in the private namespace and die with it; never delete through one.
    if findmnt -rn -o TARGET | grep -q "^$WORK"; then
        echo "$PROG: mounts still under $WORK; not deleting it" >&2
        return
    fi
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
start=$SECONDS

# A snapshot of the checkout (tracked and untracked-but-not-ignored files), so the wheel
# and the installer come from one tree even if the checkout changes meanwhile.
SNAP=$WORK/src
mkdir -p "$SNAP"
if git -c safe.directory="$CHECKOUT" -C "$CHECKOUT" rev-parse --git-dir >/dev/null 2>&1; then
    git -c safe.directory="$CHECKOUT" -C "$CHECKOUT" ls-files -z --cached --others --exclude-standard \
        | tar -C "$CHECKOUT" -c --null --no-recursion --ignore-failed-read -T - -f - 2>/dev/null \
        | tar -x -C "$SNAP"
else
    tar -C "$CHECKOUT" -c --exclude=.git --exclude='.venv*' --exclude=.cache -f - . | tar -x -C "$SNAP"
fi
UV_PYTHON_DOWNLOADS=never uv build --quiet --wheel --out-dir "$WORK/dist" "$SNAP"
WHEEL=$(cd "$WORK/dist" && ls da3_edge-*.whl)
# The next version: the same tree with its version bumped (an update's wheel).
cp -a "$SNAP" "$WORK/src-next"
NEXT_VERSION=$(python3 -c 'import re, sys
v = re.search(r"^version = \"(\d+)\.(\d+)\.(\d+)\"$", open(sys.argv[1]).read(), re.M).groups()
print(f"{v[0]}.{v[1]}.{int(v[2]) + 1}")' "$SNAP/pyproject.toml")
sed -i "s/^version = \".*\"$/version = \"$NEXT_VERSION\"/" "$WORK/src-next/pyproject.toml"
UV_PYTHON_DOWNLOADS=never uv build --quiet --wheel --out-dir "$WORK/dist/next" "$WORK/src-next"
NEXT=$(cd "$WORK/dist/next" && ls da3_edge-*.whl)
[ "$(uname -m)" = aarch64 ] || [ -f "$SNAP/scripts/arm/cpuinfo-pi5.txt" ] \
    || die "scripts/arm/cpuinfo-pi5.txt missing (the Pi 5 /proc/cpuinfo shown under qemu)"
echo "wheel: $WHEEL (uv build on the host)"

# A copy of the models too: MODELS_DIR may be rebuilt while the check runs (a test run
# refreshing .cache/tests), and a bind mount would then show an empty directory.
mkdir -p "$WORK/models"
cp -- "$MODELS_SRC"/manifest.json "$MODELS_SRC"/*.tflite "$WORK/models/"
cp -- "$MODELS_SRC"/*.pte "$WORK/models/" 2>/dev/null || true

# The release, and the core --build-models must make from it, built here on x86_64 (the
# installed build on the emulated A76 must give the same bytes).
mkdir -p "$WORK/release"
if [ -n "$RELEASE_SRC" ]; then
    cp -- "$RELEASE_SRC"/model.safetensors "$WORK/release/"
    cp -- "$RELEASE_SRC"/config.json "$WORK/release/" 2>/dev/null || true
    (cd "$CHECKOUT" && UV_PYTHON_DOWNLOADS=never uv run --frozen --no-sync da3-edge models build \
        --weights "$WORK/release" --shape 42x56 --no-stages --out "$WORK/built-x86" >/dev/null)
fi

# The --models-url archive: a different set (the int8 core model and the stage programs).
mkdir -p "$WORK/url/src/da3-edge-models"
python3 - "$WORK/models" "$WORK/url/src/da3-edge-models" <<'PY'
import json, shutil, sys
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
manifest = json.loads((src / "manifest.json").read_text())
cores = [a for a in manifest["artifacts"] if a["kind"] == "core"]
keep = [a for a in cores if a.get("precision") == "int8"] or [min(cores, key=lambda a: a["bytes"])]
manifest["artifacts"] = keep + [a for a in manifest["artifacts"] if a["kind"] != "core"]
for a in manifest["artifacts"]:
    shutil.copyfile(src / a["file"], out / a["file"])
(out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
PY
tar -czf "$WORK/url/models.tar.gz" -C "$WORK/url/src" da3-edge-models
URL_SHA=$(sha256sum "$WORK/url/models.tar.gz" | cut -d' ' -f1)
# And one of the very files --models installs (MODELS_DIR's).
mkdir -p "$WORK/url/same"
cp -r "$WORK/models" "$WORK/url/same/da3-edge-models"
tar -czf "$WORK/url/same.tar.gz" -C "$WORK/url/same" da3-edge-models
SAME_SHA=$(sha256sum "$WORK/url/same.tar.gz" | cut -d' ' -f1)

ROOT=$WORK/root
mkdir -p "$ROOT"
tar -xf "$ROOTFS_TAR" -C "$ROOT" --numeric-owner
rm -f "$ROOT/etc/resolv.conf"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's own CA certificates (a TLS-intercepting proxy's, say) are trusted inside too;
# SSL_CERT_FILE and the proxy variables are passed on (above).
if [ -n "$(ls /usr/local/share/ca-certificates/*.crt 2>/dev/null)" ]; then
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
# Package scripts must not try to start services in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
echo "rootfs: $ROOTFS_TAR -> $ROOT ($(. "$ROOT/etc/os-release" && echo "$PRETTY_NAME"), $(( SECONDS - start )) s to prepare)"

set +e
WORK=$WORK ROOT=$ROOT SNAP=$SNAP WHEEL=$WHEEL URL_SHA=$URL_SHA SAME_SHA=$SAME_SHA \
    NEXT=$NEXT NEXT_VERSION=$NEXT_VERSION unshare --mount --pid --fork --propagation private -- bash "$0" --inner
rc=$?
set -e
echo "installer-check: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s (emulated arm64)"
exit $rc
