#!/usr/bin/env bash
# Install da3-edge and its systemd service on Raspberry Pi OS 64-bit (bookworm or
# trixie; plain Debian works too, without the Pi camera). Run as root. Idempotent:
# a second run with the same inputs changes nothing and downloads nothing.
#
# What it does, in order (docs/how-to/raspberry-pi.md explains each step):
#   apt packages, models (fetched and checked first), the da3-edge user, a venv of the
#   program's own in /opt/da3-edge/venvs (uv from PyPI, the runtime set pinned with
#   hashes in requirements/), the models in /opt/da3-edge/models, the config in
#   /etc/da3-edge/da3-edge.toml (created once; only --config replaces it), systemd/ in
#   /opt/da3-edge/ (the units' Documentation=), the switch of the link /opt/da3-edge/venv,
#   the units: the daemon and serve on 127.0.0.1:8000 (enabled; started when systemd
#   runs; rolled back when they do not come up). What is in service is recorded before
#   any of it is replaced, so that an update cut short (a power cut, a kill) is rolled
#   back or finished at the next boot (--recover). --uninstall takes it all away again
#   (--purge: data and user too).
set -Eeuo pipefail

PROG=install-pi.sh
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the checkout (or bundle) this script is in
OPT=/opt/da3-edge
VENV=$OPT/venv  # a link to the venv in service, one of $VENVS
VENVS=$OPT/venvs
VENV_BEFORE=$OPT/venv-before  # a link to the venv before it, kept for a rollback
ETC=/etc/da3-edge
CONFIG=$ETC/da3-edge.toml
# The models are root's and read-only to every service (the daemon never writes them);
# /var/lib/da3-edge is the daemon's StateDirectory=, where root works by no path at all:
# a process running as the service user could swap or plant anything in it.
MODELS=$OPT/models
STATE=/var/lib/da3-edge
OLD_MODELS=$STATE/models  # older installs kept the models here, owned by the service user
UNIT_DIR=/etc/systemd/system
UNITS=(da3-edge da3-edge-serve da3-edge-publish)  # the daemon, serve (HTTP, loopback), MQTT
FINISH_UNIT=da3-edge-finish-update  # at boot, before those: an update cut short, settled
# serve and publish run as users of their own in the daemon's group (each reads only its
# own secrets; the store is group-readable): systemd/README.md.
COMPANIONS=(da3-edge-serve da3-edge-publish)
ENABLE=(da3-edge da3-edge-serve)  # publish stays off until [mqtt] is configured
USER_NAME=da3-edge
BIN_LINK=/usr/local/bin/da3-edge
CACHE=/var/cache/da3-edge
# uv reads [tool.uv] from any pyproject.toml at or above its working directory; run from
# a checkout, the project's own settings (made for developers) would reach this install.
export UV_NO_CONFIG=1 UV_CACHE_DIR=$CACHE/uv UV_PYTHON_DOWNLOADS=never
# uv trusts the system's CA store, as pip and apt do (a proxy's CA added there reaches all three).
export UV_SYSTEM_CERTS=1
# Everything this installer downloads or packs (pip, the ExecuTorch wheel, LiteRT's
# weight cache while models are checked) lands in one place --purge removes, not in
# root's home.
export XDG_CACHE_HOME=$CACHE/installer
# The system's Python writes no bytecode of its own modules on our behalf (the venv's
# is compiled on purpose: uv --compile-bytecode).
export PYTHONDONTWRITEBYTECODE=1
# Root's Pythons (python -c, python -) import nothing from the directory this is run from:
# a zipfile.py or picamera2.py in a shared download folder would otherwise run as root.
export PYTHONSAFEPATH=1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 DEBIAN_FRONTEND=noninteractive
export HOME=${HOME:-/root}  # cloud-init's runcmd may run without one

usage() {
    cat <<'EOF'
usage: install-pi.sh [--from PATH] [--models DIR | --models-url URL --models-sha256 HEX |
                      --build-models SRC [--weights-sha256 HEX]]
                     [--config FILE] [--serve-users FILE] [--require-executorch]
                     [--no-start] [--ready-timeout S] [-h]
       install-pi.sh --recover
       install-pi.sh --uninstall [--purge]

Install da3-edge as a systemd service on Raspberry Pi OS 64-bit (bookworm, trixie).
Run as root. Running it again with the same inputs changes nothing.

options:
  --from PATH           da3-edge to install: a wheel (.whl) or a source checkout
                        (default: the checkout this script is in)
  --models DIR          copy this model directory (manifest.json, *.tflite, *.pte)
                        into /opt/da3-edge/models
  --models-url URL      download a .tar.gz of a model directory (https://, file://)
  --models-sha256 HEX   the SHA-256 of that .tar.gz (required with --models-url),
                        checked before anything is extracted or installed
  --build-models SRC    build the models here from DA3's release file, with no torch
                        (`da3-edge models build --for-config`: the cores the config
                        needs): SRC is a release folder (config.json +
                        model.safetensors), or 'hub' to fetch it from the Hugging
                        Face hub first (HF_ENDPOINT names a mirror) into
                        /var/cache/da3-edge/release, resumed if cut short
  --weights-sha256 HEX  with --build-models hub: the release file's SHA-256 (else the
                        hub's own is checked)
  --config FILE         install this config as /etc/da3-edge/da3-edge.toml
                        (checked first; a different one there is kept as .old)
  --serve-users FILE    the page's login for the LAN (one user:password line, the
                        password plain or as da3-edge card's scrypt hash): installed
                        as /etc/da3-edge/serve-users for da3-edge-serve only, and the
                        unit's drop-in lan.conf lets loopback, link-local and the
                        private ranges (RFC 1918, ULA) in; the config's [serve] host
                        decides where it listens
  --require-executorch  fail when the ExecuTorch runner cannot be built (default:
                        carry on with the numpy stages and say so)
  --no-start            enable the service but do not (re)start it now
  --ready-timeout S     a new program beside one in service: seconds each unit has
                        to come up after the switch (the daemon: READY), else the
                        one before is back in service, in one step (default: 180)
  --recover             finish or roll back an update that a power cut or a kill
                        interrupted (da3-edge-finish-update.service runs this at
                        boot, before the other units), then exit
  --uninstall           stop and remove the units and /opt/da3-edge (the venv, and
                        the copy of this script the install leaves there to run
                        this); keep /etc/da3-edge and the models
  --purge               with --uninstall: also the config, the models, the caches,
                        the store and the da3-edge user
  -h, --help            show this help and exit

Installs the program in a venv of its own in /opt/da3-edge/venvs (the link
/opt/da3-edge/venv names the one in service, venv-before the one before it),
/etc/da3-edge/da3-edge.toml (created once; only --config replaces it),
/opt/da3-edge/models, /opt/da3-edge/systemd and the units in /etc/systemd/system:
da3-edge.service (enabled; started if systemd runs), da3-edge-serve.service
beside it (the store over HTTP on 127.0.0.1:8000) and da3-edge-publish.service
(MQTT; installed disabled until [mqtt] is configured).
Frames then appear in /run/da3-edge. Check with: systemctl status da3-edge;
/opt/da3-edge/venv/bin/da3-edge doctor; curl http://127.0.0.1:8000/healthz
EOF
}

# ---------------------------------------------------------------------------- the update record
# An update replaces what is in service one rename at a time: the models, files in /etc
# (the config, serve's login and drop-in, the units), the venv link. Before the first,
# $RECORD says durably what was in service, and each thing is recorded before it is
# replaced. A run that does not stand (an error, a kill, a power cut) is rolled back
# from it: on this run's way out, else at the next boot (da3-edge-finish-update.service
# runs --recover before the units start), else by the next run. Once every unit it
# restarted is up the record says "up": what is left is cleanup, finished the same ways.
# docs/reliability.md ("Updates"): the guarantees, and the kill list that tests them.
RECORD=$OPT/.update
MODELS_BEFORE=""  # where this run moved the models in service, until the run stands
# Fault injection for the kill list (scripts/arm/installer-check.sh): at the commit
# point named, the run kills itself (NAME) or sends itself SIGHUP (NAME:hup).
KILL_AT=${DA3_EDGE_INSTALL_KILL_AT:-}
point() {  # point LINK VENV: the link names that venv, replaced in one rename
    ln -sfn "venvs/$(basename "$2")" "$OPT/.venv-link"
    mv -T "$OPT/.venv-link" "$1"
}
commit() {  # commit NAME: what was written is on the card before the run goes on
    sync
    case $KILL_AT in
        "$1") kill -KILL $$ ;;
        "$1:hup") kill -HUP $$ ;;
    esac
}
record_set() {  # record_set KEY VALUE, durably (written aside, then renamed)
    printf '%s\n' "$2" >"$RECORD/.$1.new"
    sync "$RECORD/.$1.new"
    mv -T "$RECORD/.$1.new" "$RECORD/$1"
    sync "$RECORD"
}
record_get() { cat "$RECORD/$1" 2>/dev/null || true; }
record_begin() {  # before the first thing in service is replaced (a first install: nothing yet)
    [ ! -d "$RECORD" ] || return 0
    rm -rf "$RECORD.new"
    mkdir -m 0700 "$RECORD.new" "$RECORD.new/files"
    echo switching >"$RECORD.new/phase"
    echo "${CUR:-}" >"$RECORD.new/venv"
    [ "${NEW:-}" = "${CUR:-}" ] || echo "$NEW" >"$RECORD.new/new"  # the venv this run made
    sync "$RECORD.new"/* "$RECORD.new/files" "$RECORD.new"
    mv -T "$RECORD.new" "$RECORD"
    sync "$OPT"
    commit record
}
record_file() {  # record_file PATH: PATH as it is (or that it is absent), before this run changes it
    [ -d "$RECORD" ] || return 0
    local key=${1//\//%}
    [ ! -e "$RECORD/files/$key" ] && [ ! -e "$RECORD/files/$key.absent" ] || return 0
    if [ -e "$1" ]; then
        cp -p "$1" "$RECORD/files/.$key.new"
        sync "$RECORD/files/.$key.new"
        mv -T "$RECORD/files/.$key.new" "$RECORD/files/$key"
    else
        : >"$RECORD/files/$key.absent"
    fi
    sync "$RECORD/files"
}
put_file() {  # put_file SRC DEST [install's options]: DEST replaced in one rename, recorded first
    local src=$1 dest=$2
    shift 2
    record_file "$dest"
    install "$@" "$src" "$dest.new"
    sync "$dest.new"
    mv -T "$dest.new" "$dest"
}
undo_update() {  # everything the record names put back as it was; the record goes last
    local venv path key dest models new back=()
    venv=$(record_get venv)
    if [ -n "$venv" ] && [ -d "$venv" ] && { [ -L "$VENV" ] || [ ! -e "$VENV" ]; } \
        && [ "$(readlink -f "$VENV")" != "$venv" ]; then
        point "$VENV" "$venv"
        back+=("$VENV -> venvs/$(basename "$venv")")
    fi
    for path in "$RECORD"/files/*; do
        [ -e "$path" ] || continue
        key=${path##*/}
        dest=${key//%//}
        if [ "${key%.absent}" != "$key" ]; then  # it was not there
            dest=${dest%.absent}
            [ -e "$dest" ] || continue
            rm -f "$dest"
            back+=("$dest removed")
        elif ! cmp -s "$path" "$dest"; then
            cp -p "$path" "$dest.new"
            sync "$dest.new"
            mv -T "$dest.new" "$dest"
            back+=("$dest")
            [ "$dest" != "$CONFIG" ] || echo "$PROG: the config before this run is back in $CONFIG" >&2
        fi
    done
    models=$(record_get models)
    if [ -n "$models" ] && [ -d "$models" ]; then
        rm -rf "$MODELS"
        mv -T "$models" "$MODELS"
        echo "$PROG: the models before this run are back in $MODELS" >&2
        back+=("$MODELS")
    fi
    # What the update made and never put in service: its venv, its staged models.
    new=$(record_get new)
    [ -z "$new" ] || [ "$(readlink -f "$VENV")" = "$new" ] || rm -rf "$new"
    rm -rf "$OPT"/.models-new.*
    sync
    rm -rf "$RECORD"
    sync "$OPT"
    [ ${#back[@]} -eq 0 ] || echo "$PROG: put back as before this run: ${back[*]}" >&2
}
finish_update() {  # the update came up: what it replaced goes, the venv before it is kept
    local venv models
    venv=$(record_get venv)
    models=$(record_get models)
    [ -z "$models" ] || rm -rf "$models"
    if [ -n "$venv" ] && [ -d "$venv" ] && [ "$(readlink -f "$VENV")" != "$venv" ]; then
        point "$VENV_BEFORE" "$venv"
    fi
    sync
    rm -rf "$RECORD"
    sync "$OPT"
}
settle() {  # an update this run (or one cut short) left: finished if it came up, else rolled back
    [ -d "$RECORD" ] || return 0
    if [ "$(record_get phase)" = up ]; then
        finish_update
    else
        undo_update
    fi
}
put_back() {  # a run that does not stand leaves what is in service as it was
    MODELS_BEFORE=""
    [ ! -d "$RECORD" ] || [ "$(record_get phase)" = up ] || undo_update
}
die() {
    put_back
    echo "$PROG: error: $*" >&2
    exit 1
}

usage_error() {
    echo "$PROG: error: $*" >&2
    echo "Run '$PROG --help' for usage." >&2
    exit 2
}

STEP="start"
step() {  # each step with the time since the run began: slow told from stuck
    STEP=$1
    echo "==> $1 (at ${SECONDS} s)"
}

note() { echo "    $*"; }

# A command that fails under `set -e` ends the run with one line naming the step.
# shellcheck disable=SC2154  # rc is assigned inside the trap
trap 'rc=$?; put_back; echo "$PROG: error: step \"$STEP\" failed (exit $rc); see the output above" >&2; exit $rc' ERR

FROM=""
RECOVER=0
CONFIG_FILE=""
SERVE_USERS=""
REQUIRE_ET=0
UNINSTALL=0
PURGE=0
MODELS_DIR=""
MODELS_URL=""
MODELS_SHA256=""
BUILD_FROM=""
WEIGHTS_SHA256=""
START=1
READY_TIMEOUT=180
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --from) [ $# -ge 2 ] || usage_error "--from needs a PATH"; FROM=$2; shift 2 ;;
        --from=*) FROM=${1#*=}; shift ;;
        --models) [ $# -ge 2 ] || usage_error "--models needs a DIR"; MODELS_DIR=$2; shift 2 ;;
        --models=*) MODELS_DIR=${1#*=}; shift ;;
        --models-url) [ $# -ge 2 ] || usage_error "--models-url needs a URL"; MODELS_URL=$2; shift 2 ;;
        --models-url=*) MODELS_URL=${1#*=}; shift ;;
        --models-sha256) [ $# -ge 2 ] || usage_error "--models-sha256 needs a HEX digest"; MODELS_SHA256=$2; shift 2 ;;
        --models-sha256=*) MODELS_SHA256=${1#*=}; shift ;;
        --build-models) [ $# -ge 2 ] || usage_error "--build-models needs a release folder or 'hub'"; BUILD_FROM=$2; shift 2 ;;
        --build-models=*) BUILD_FROM=${1#*=}; shift ;;
        --weights-sha256) [ $# -ge 2 ] || usage_error "--weights-sha256 needs a HEX digest"; WEIGHTS_SHA256=$2; shift 2 ;;
        --weights-sha256=*) WEIGHTS_SHA256=${1#*=}; shift ;;
        --config) [ $# -ge 2 ] || usage_error "--config needs a FILE"; CONFIG_FILE=$2; shift 2 ;;
        --config=*) CONFIG_FILE=${1#*=}; shift ;;
        --serve-users) [ $# -ge 2 ] || usage_error "--serve-users needs a FILE"; SERVE_USERS=$2; shift 2 ;;
        --serve-users=*) SERVE_USERS=${1#*=}; shift ;;
        --require-executorch) REQUIRE_ET=1; shift ;;
        --no-start) START=0; shift ;;
        --ready-timeout) [ $# -ge 2 ] || usage_error "--ready-timeout needs seconds"; READY_TIMEOUT=$2; shift 2 ;;
        --ready-timeout=*) READY_TIMEOUT=${1#*=}; shift ;;
        --recover) RECOVER=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        --purge) PURGE=1; shift ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done

# ---------------------------------------------------------------------------- checks
if [ $UNINSTALL -eq 1 ]; then
    [ -z "$FROM$MODELS_DIR$MODELS_URL$MODELS_SHA256$BUILD_FROM$WEIGHTS_SHA256$CONFIG_FILE$SERVE_USERS" ] \
        && [ $REQUIRE_ET$START = 01 ] || usage_error "--uninstall takes only --purge"
elif [ $PURGE -eq 1 ]; then
    usage_error "--purge goes with --uninstall"
fi
if [ $RECOVER -eq 1 ]; then
    [ -z "$FROM$MODELS_DIR$MODELS_URL$MODELS_SHA256$BUILD_FROM$WEIGHTS_SHA256$CONFIG_FILE$SERVE_USERS" ] \
        && [ $REQUIRE_ET$START$UNINSTALL = 010 ] || usage_error "--recover takes no other argument"
fi
[[ $READY_TIMEOUT =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ "$READY_TIMEOUT" != 0 ] \
    || usage_error "--ready-timeout must be a number of seconds above 0"
[ -n "$MODELS_DIR" ] && [ -n "$MODELS_URL" ] && usage_error "--models and --models-url exclude each other"
[ -n "$BUILD_FROM" ] && [ -n "$MODELS_DIR$MODELS_URL" ] && usage_error "--build-models excludes --models and --models-url"
if [ -n "$WEIGHTS_SHA256" ]; then
    [ "$BUILD_FROM" = hub ] || usage_error "--weights-sha256 goes with --build-models hub"
    WEIGHTS_SHA256=$(printf '%s' "$WEIGHTS_SHA256" | tr 'A-F' 'a-f')
    [[ $WEIGHTS_SHA256 =~ ^[0-9a-f]{64}$ ]] || usage_error "--weights-sha256 must be 64 hex digits"
fi
if [ -n "$MODELS_URL" ]; then
    [ -n "$MODELS_SHA256" ] || usage_error "--models-url needs --models-sha256 (the .tar.gz's SHA-256)"
    MODELS_SHA256=$(printf '%s' "$MODELS_SHA256" | tr 'A-F' 'a-f')
    [[ $MODELS_SHA256 =~ ^[0-9a-f]{64}$ ]] || usage_error "--models-sha256 must be 64 hex digits"
elif [ -n "$MODELS_SHA256" ]; then
    usage_error "--models-sha256 goes with --models-url"
fi
[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0 ...)"
# The terminal may go (an SSH session dropped, sudo's pty closed): the run goes on.
# SIGHUP is ignored, by the programs it starts too; on a terminal, the output passes
# through tee, which writes on to /dev/null when the terminal cannot take it, so that
# no write of this script fails (a failed write would end the run half way).
trap '' HUP
if [ -t 1 ] || [ -t 2 ]; then
    exec > >(tee --output-error=warn /dev/null) 2> >(tee --output-error=warn /dev/null >&2)
fi
# /run is root's alone (/run/lock is writable by every user): nobody else can plant the lock.
exec 9>/run/da3-edge-install.lock
lock_holders() {  # "pid N: command, ..." of the processes other than this one with file $1 open
    local fd pid out=""
    for fd in /proc/[0-9]*/fd/*; do
        [ "$(readlink "$fd" 2>/dev/null)" = "$1" ] || continue
        pid=${fd#/proc/}
        pid=${pid%%/*}
        [ "$pid" != $$ ] || continue
        out+="${out:+, }pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
    done
    printf '%s' "$out"
}
flock -n 9 || die "another $PROG is running ($(lock_holders /run/da3-edge-install.lock 9>&-))"

# An update a power cut or a kill interrupted: finished if it had come up, else rolled
# back, before anything else (at boot, before the units start: --recover).
if [ -d "$RECORD" ]; then
    step "an update cut short ($(record_get phase))"
    settle
    if [ -d /run/systemd/system ] && [ $RECOVER -eq 0 ]; then
        systemctl daemon-reload
        for unit in "${UNITS[@]}"; do
            ! systemctl is-active --quiet "$unit" || systemctl restart "$unit" \
                || echo "$PROG: warning: $unit did not restart after the rollback" >&2
        done
    elif [ -d /run/systemd/system ]; then
        systemctl daemon-reload
    fi
fi
rm -rf "$RECORD.new"
if [ $RECOVER -eq 1 ]; then
    echo "==> done: no update in progress"
    exit 0
fi

# ---------------------------------------------------------------------------- uninstall
if [ $UNINSTALL -eq 1 ]; then
    if [ $PURGE -eq 1 ]; then step "uninstall --purge"; else step "uninstall"; fi
    systemd_up=0
    [ -d /run/systemd/system ] && systemd_up=1
    for unit in "$FINISH_UNIT" "${UNITS[@]}"; do
        [ -e "$UNIT_DIR/$unit.service" ] || continue
        if [ $systemd_up -eq 1 ]; then
            systemctl disable --now "$unit" 2>&1 | sed 's/^/    /'
        else
            systemctl disable "$unit" 2>&1 | sed 's/^/    /'
        fi
        rm -f "$UNIT_DIR/$unit.service"
        note "removed $UNIT_DIR/$unit.service"
    done
    if [ $PURGE -eq 1 ]; then
        rm -rf "$OPT"
        note "removed $OPT (the venv, the models, units' copies)"
    elif [ -d "$OPT" ]; then
        find "$OPT" -mindepth 1 -maxdepth 1 ! -path "$MODELS" -exec rm -rf {} +
        note "removed the venv and units' copies from $OPT"
    fi
    if grep -q "written by install-pi.sh" "$BIN_LINK" 2>/dev/null; then
        rm -f "$BIN_LINK"
        note "removed $BIN_LINK"
    fi
    if [ $PURGE -eq 1 ]; then
        for unit in "$FINISH_UNIT" "${UNITS[@]}"; do rm -rf "$UNIT_DIR/$unit.service.d"; done
        # The store is the daemon's RuntimeDirectory (gone with the unit's stop); a store
        # left by a daemon run by hand, and the first boot's log, go too.
        rm -rf "$ETC" "$STATE" "$CACHE" /run/da3-edge /var/log/da3-edge-install.log
        note "removed $ETC, $STATE, $CACHE, /run/da3-edge"
        for user in "${COMPANIONS[@]}" "$USER_NAME"; do
            if id -u "$user" >/dev/null 2>&1; then
                userdel "$user"
                note "removed user $user"
            fi
        done
        if getent group "$USER_NAME" >/dev/null; then groupdel "$USER_NAME"; fi
    else
        note "kept $ETC and $MODELS (--purge removes them, the caches and the user)"
    fi
    [ $systemd_up -eq 0 ] || systemctl daemon-reload
    echo "==> done: da3-edge is uninstalled."
    exit 0
fi

# What the script needs beside itself (edge/deploy.py's FILES): a checkout, a card's
# bundle and an installed da3-edge (edge/data/deploy/) each hold them.
for f in requirements/runtime.txt requirements/runtime-numpy1.txt requirements/uv.txt \
    systemd/README.md systemd/da3-edge.service systemd/da3-edge-serve.service \
    systemd/da3-edge-publish.service systemd/serve-lan.conf systemd/$FINISH_UNIT.service; do
    [ -f "$SRC/$f" ] || die "$SRC/$f is missing: run the script from a da3-edge checkout, a card's bundle or an installed da3-edge's edge/data/deploy/"
done
if [ -n "$MODELS_DIR" ]; then
    [ -f "$MODELS_DIR/manifest.json" ] || die "--models $MODELS_DIR: no manifest.json there"
    MODELS_DIR=$(cd "$MODELS_DIR" && pwd)
fi
if [ -n "$BUILD_FROM" ] && [ "$BUILD_FROM" != hub ]; then
    [ -f "$BUILD_FROM/model.safetensors" ] || die "--build-models $BUILD_FROM: no model.safetensors there (a release folder, or 'hub')"
    BUILD_FROM=$(cd "$BUILD_FROM" && pwd)
fi
if [ -n "$CONFIG_FILE" ]; then
    [ -f "$CONFIG_FILE" ] || die "--config $CONFIG_FILE: no such file"
    CONFIG_FILE=$(cd "$(dirname "$CONFIG_FILE")" && pwd)/$(basename "$CONFIG_FILE")
fi
if [ -n "$SERVE_USERS" ]; then
    [ -f "$SERVE_USERS" ] || die "--serve-users $SERVE_USERS: no such file"
    [ "$(wc -l <"$SERVE_USERS")" -le 1 ] && grep -Eq '^[A-Za-z0-9_.-]+:[^[:space:]]+$' "$SERVE_USERS" \
        || die "--serve-users $SERVE_USERS: must hold one line, user:password (or user:scrypt\$...)"
fi
FROM=${FROM:-$SRC}
if [ -d "$FROM" ]; then
    [ "$FROM" != "$SRC" ] || [ -f "$FROM/pyproject.toml" ] || die "$SRC is not a checkout: give --from WHEEL"
    [ -f "$FROM/pyproject.toml" ] || die "--from $FROM: neither a wheel nor a source checkout (no pyproject.toml)"
    FROM=$(cd "$FROM" && pwd)
elif [ -f "$FROM" ]; then
    case $FROM in *.whl) ;; *) die "--from $FROM: not a .whl file" ;; esac
    FROM=$(cd "$(dirname "$FROM")" && pwd)/$(basename "$FROM")
else
    die "--from $FROM: no such file or directory"
fi
case $(uname -m) in
    aarch64 | x86_64) ;;
    *) die "$(uname -m): ai-edge-litert has no wheels for this CPU; use Raspberry Pi OS 64-bit" ;;
esac
command -v apt-get >/dev/null || die "apt-get not found: this installer is for Raspberry Pi OS / Debian"

TMP=$(mktemp -d /tmp/da3-edge-install.XXXXXX)
PULLED=$CACHE/installer/models-pull  # root's: --models-url lands here, then is installed
HOLD=""  # a root-only folder the models of an older install are moved into
NEW=""  # the venv this run installs into; removed on a failure unless it is in service
cleanup() {
    put_back
    rm -rf "$TMP" "$OPT"/.models-new.* "$OPT"/.models-built.* "$OPT/.venv-link" "$PULLED" ${HOLD:+"$HOLD"}
    if [ -n "$NEW" ] && [ "$NEW" != "$(readlink -f "$VENV")" ] && [ "$NEW" != "${CUR:-}" ]; then
        rm -rf "$NEW"
    fi
}
trap cleanup EXIT
os_name=$( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo "unknown OS")
echo "da3-edge installer: $os_name, $(uname -m); from $FROM"

# ---------------------------------------------------------------------------- models, fetched
# First of all: a failed download or a wrong SHA-256 leaves the system exactly as it was.
NEW_MODELS=""
if [ -n "$MODELS_URL" ]; then
    step "models: download"
    if [ -f "$MODELS/.tar-sha256" ] && [ "$(cat "$MODELS/.tar-sha256")" = "$MODELS_SHA256" ]; then
        note "unchanged: $MODELS already holds the .tar.gz with SHA-256 $MODELS_SHA256"
    else
        command -v python3 >/dev/null || die "python3 is missing (sudo apt install python3)"
        # da3-edge's own `models pull` (edge/packs.py: the standard library only), run from
        # what is being installed, before its venv exists: a progress line, an interrupted
        # download resumed by the next run (kept in root's $PULLED.*), the SHA-256, then the
        # manifest and every model file checked.
        install -d -m 0700 "$(dirname "$PULLED")"
        PYTHONPATH=$FROM python3 -m edge models pull "$MODELS_URL" \
            --sha256 "$MODELS_SHA256" --out "$PULLED" || exit 1
        note "SHA-256 ok ($MODELS_SHA256)"
        NEW_MODELS=$PULLED
    fi
elif [ -n "$MODELS_DIR" ]; then
    NEW_MODELS=$MODELS_DIR
fi

# ---------------------------------------------------------------------------- apt
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
candidate() {
    local c
    c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
    [ -n "$c" ] && [ "$c" != "(none)" ] && echo "$c"
}
lists_fresh() { [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -60 2>/dev/null | head -n1)" ]; }
apt_update() {
    note "apt-get update"
    apt-get update -q
}

step "apt packages"
# A package left half-installed (power lost during apt: a Pi unplugged in the middle of
# its first boot) stops every apt-get until dpkg finishes it.
if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
    note "dpkg was interrupted: dpkg --configure -a"
    dpkg --configure -a
fi
need=(python3 python3-venv ca-certificates procps)  # procps: /bin/kill for ExecReload=
need+=(g++)  # builds the ExecuTorch runner once (da3-edge install-executorch)
command -v systemctl >/dev/null || need+=(systemd)
# Raspberry Pi repository only: the Pi camera from Python, and the camera tools.
optional=(python3-picamera2)
if ! installed rpicam-apps && ! installed rpicam-apps-lite && ! installed rpicam-apps-core; then
    optional+=(rpicam-apps-lite)  # the headless build (no preview window); Pi OS Lite has it
fi
missing=()
for p in "${need[@]}" "${optional[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    # Refresh stale lists before installing from them (old versions leave the mirror),
    # but not just to look again for a Pi-only package plain Debian will never have.
    if ! lists_fresh; then
        refresh=0
        compgen -G '/var/lib/apt/lists/*Packages*' >/dev/null || refresh=1
        for p in "${missing[@]}"; do
            if [[ " ${optional[*]} " != *" $p "* ]] || [ -n "$(candidate "$p")" ]; then refresh=1; fi
        done
        [ $refresh -eq 0 ] || apt_update
    fi
    to_install=()
    for p in "${missing[@]}"; do
        if [ -n "$(candidate "$p")" ]; then
            to_install+=("$p")
        elif [[ " ${optional[*]} " == *" $p "* ]]; then
            note "skipped: $p is only in the Raspberry Pi repository"
        else
            die "apt has no package $p (is this Debian / Raspberry Pi OS 12 or 13?)"
        fi
    done
    if [ ${#to_install[@]} -gt 0 ]; then
        note "installing ${to_install[*]}"
        apt-get install -y -q --no-install-recommends "${to_install[@]}"
    fi
else
    note "all present: ${need[*]} ${optional[*]}"
fi

# The numpy that apt's Python extensions (picamera2's simplejpeg) are built against:
# installed python3-numpy, else the candidate. 1.x (bookworm) -> numpy 1.x in the venv.
deb_numpy=$(dpkg-query -W -f='${Version}' python3-numpy 2>/dev/null || true)
installed python3-numpy || deb_numpy=$(candidate python3-numpy || true)
deb_numpy=${deb_numpy#*:}
OVERRIDE=()
if [ "${deb_numpy%%.*}" = 1 ]; then
    OVERRIDE=(--override "$SRC/requirements/runtime-numpy1.txt")
fi

# ---------------------------------------------------------------------------- user
step "users $USER_NAME, ${COMPANIONS[*]}"
if id -u "$USER_NAME" >/dev/null 2>&1; then
    note "$USER_NAME exists"
else
    useradd --system --user-group --no-create-home --home-dir "$STATE" \
        --shell /usr/sbin/nologin "$USER_NAME"
    note "created $USER_NAME (system user, group $USER_NAME; the unit adds group video)"
fi
for user in "${COMPANIONS[@]}"; do
    if id -u "$user" >/dev/null 2>&1; then
        note "$user exists"
    else
        useradd --system --gid "$USER_NAME" --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$user"
        note "created $user (system user in group $USER_NAME)"
    fi
done

# The Pi's owner (who ran sudo, else the first regular account: Imager's user at first
# boot) reads the store as the service's group does (/run/da3-edge is 0750).
OWNER=${SUDO_USER:-}
[ "$OWNER" = root ] && OWNER=""
[ -n "$OWNER" ] || OWNER=$(awk -F: '$3 >= 1000 && $3 < 60000 && $7 !~ /(nologin|false)$/ { print $1; exit }' /etc/passwd)
if [ -z "$OWNER" ]; then
    note "no regular user yet: add yours to group $USER_NAME to read the store (sudo usermod -aG $USER_NAME NAME)"
elif id -nG "$OWNER" | tr ' ' '\n' | grep -qx "$USER_NAME"; then
    note "$OWNER is in group $USER_NAME"
else
    usermod -aG "$USER_NAME" "$OWNER"
    note "added $OWNER to group $USER_NAME: reads /run/da3-edge from the next login"
fi

# ---------------------------------------------------------------------------- venv
# Each program has a venv of its own in $VENVS; $VENV links to the one in service and is
# switched in one rename once a new one has passed its checks (step "switch"); the one
# before it stays for a rollback. A venv holds absolute paths: each is made where it stays.
venv_ok() {  # a venv whose pip runs (ensurepip comes last: a venv cut short fails), on this Python
    [ -x "$1/bin/python" ] && "$1/bin/python" -m pip --version >/dev/null 2>&1 \
        && [ "$("$1/bin/python" -c 'import sys; print(sys.version_info[:2])')" = "$(python3 -c 'import sys; print(sys.version_info[:2])')" ]
}
uv_pin=$(sed -n 's/^uv==\([0-9.]*\).*/\1/p' "$SRC/requirements/uv.txt")
uv_is_pinned() { [ "$("$1/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" = "$uv_pin" ]; }
with_uv() {  # the pinned uv in venv $1: the service's copy (hash-checked when it came), or PyPI's
    if uv_is_pinned "$1"; then
        note "uv $uv_pin present"
    elif [ -n "${CUR:-}" ] && uv_is_pinned "$CUR"; then
        install -m 0755 "$CUR/bin/uv" "$1/bin/uv"
        note "uv $uv_pin copied from $CUR"
    else
        "$1/bin/pip" install -q --require-hashes -r "$SRC/requirements/uv.txt"
        note "installed $("$1/bin/uv" --version) in $1 from PyPI (hash-checked)"
    fi
}
seed() {  # NEW starts as hard links of CUR's packages: uv installs and compiles what differs
    local rel first f
    rel=$("$NEW/bin/python" -c 'import sys, sysconfig; print(sysconfig.get_path("purelib")[len(sys.prefix) + 1:])')
    [ -d "$CUR/$rel" ] || return 0
    # Every file is replaced, never written in place (uv unlinks before it installs; the
    # byte-compiler renames its output over), so what NEW changes leaves CUR as it was.
    if ! cp -al "$CUR/$rel" "$NEW/$rel.seed" 2>"$TMP/seed.err"; then
        rm -rf "$NEW/$rel.seed"
        note "packages not linked from $CUR ($(head -n 1 "$TMP/seed.err")): all installed anew"
        return 0
    fi
    rm -rf "${NEW:?}/$rel"
    mv -T "$NEW/$rel.seed" "$NEW/$rel"
    # The packages' commands name their venv's python (CUR's, or where CUR was made):
    # written again for NEW's.
    for f in "$CUR"/bin/*; do
        [ -f "$f" ] && [ ! -L "$f" ] && [ ! -e "$NEW/bin/${f##*/}" ] || continue
        IFS= read -r first <"$f" || continue
        case $first in "#!/"*/bin/python | "#!/"*/bin/python3) ;; *) continue ;; esac
        { echo "#!$NEW/bin/python"; tail -n +2 "$f"; } >"$NEW/bin/${f##*/}"
        chmod 0755 "$NEW/bin/${f##*/}"
    done
    note "packages of $CUR linked in (hard links): only what differs is installed and compiled"
}
make_venv() {  # NEW: a fresh venv in $VENVS, with the pinned uv
    NEW=$VENVS/$(date -u +%Y%m%dT%H%M%SZ)-$$
    mkdir -p "$VENVS"
    python3 -m venv --system-site-packages "$NEW"
    note "created $NEW with --system-site-packages ($("$NEW/bin/python" --version)): sees apt's picamera2"
    [ -z "$CUR" ] || seed
    with_uv "$NEW"
}
step "venv"
# uv makes its lock files writable by every user (for caches shared between users):
# here its cache is root's alone, and the venv's lock is made root's after it (a flock
# held by another user would stall every later install).
mkdir -p "$CACHE/uv"
chmod 0700 "$CACHE/uv"
CUR=""  # the venv in service: $VENV's target (an older install's venv is $VENV itself)
if venv_ok "$VENV"; then
    CUR=$(readlink -f "$VENV")
    note "in service: $CUR ($("$CUR/bin/python" --version))"
    with_uv "$CUR"
    NEW=$CUR
else
    make_venv
fi

step "da3-edge"
WHEEL=$FROM
if [ -d "$FROM" ]; then
    # As root, offline: uv builds with its own backend (the uv requirements/uv.txt pins,
    # hash-checked) and fetches none (an unpinned uv_build from PyPI, run as root).
    "$NEW/bin/uv" build --quiet --wheel --offline --python "$NEW/bin/python" \
        --out-dir "$TMP/dist" "$FROM" \
        || die "cannot build a wheel of $FROM with uv's own build backend: build one elsewhere (uv build --wheel) and give --from WHEEL"
    WHEEL=$(ls "$TMP"/dist/*.whl)
    note "built $(basename "$WHEEL") from $FROM"
fi
# Installed in service already with exactly these files (the wheel's RECORD hashes)?
if [ -n "$CUR" ] && "$CUR/bin/python" - "$WHEEL" <<'PY'
import sys, zipfile
from importlib import metadata

with zipfile.ZipFile(sys.argv[1]) as z:
    record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    want = {line.rsplit(",", 2)[0]: line.rsplit(",", 2)[1] for line in z.read(record).decode().splitlines() if line}
want = {path: digest for path, digest in want.items() if digest}
try:
    text = metadata.distribution("da3-edge").read_text("RECORD") or ""
except metadata.PackageNotFoundError:
    sys.exit(1)
have = {line.rsplit(",", 2)[0]: line.rsplit(",", 2)[1] for line in text.splitlines() if line}
sys.exit(0 if all(have.get(path) == digest for path, digest in want.items()) else 1)
PY
then
    note "unchanged: $(basename "$WHEEL") is installed"
    CHANGED_PROGRAM=0
else
    CHANGED_PROGRAM=1
    # A new program goes into a venv of its own, beside the one in service.
    [ "$NEW" != "$CUR" ] || make_venv
fi
UV=("$NEW/bin/uv" pip install --python "$NEW/bin/python" --compile-bytecode)
if [ ${#OVERRIDE[@]} -gt 0 ]; then
    note "Debian's numpy is $deb_numpy: numpy 1.26.4 in the venv (requirements/runtime-numpy1.txt)"
fi
step "runtime packages (requirements/runtime.txt) in $NEW"
"${UV[@]}" --require-hashes -r "$SRC/requirements/runtime.txt" "${OVERRIDE[@]}"
if [ $CHANGED_PROGRAM -eq 1 ]; then
    "${UV[@]}" --no-deps --reinstall-package da3-edge "$WHEEL"
fi
"$NEW/bin/da3-edge" --version >/dev/null
if "$NEW/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("picamera2") is None)'; then
    # A real import: a numpy mismatch shows up here, not in find_spec.
    "$NEW/bin/python" -c 'import picamera2' \
        || die "picamera2 does not import in $NEW (numpy mismatch? see docs/how-to/raspberry-pi.md)"
    note "picamera2 imports in the venv (numpy $("$NEW/bin/python" -c 'import numpy; print(numpy.__version__)'))"
fi

# ---------------------------------------------------------------------------- the record begins
# What settles an update cut short comes first, and whole: this script's copy (what
# --recover runs) and the unit that runs it at boot. Then the new venv goes to the card,
# and the record of what is in service is written before the first of it is replaced.
step "update record"
install -d -m 0755 "$OPT"
if cmp -s "$SRC/scripts/install-pi.sh" "$OPT/install-pi.sh"; then
    note "unchanged: $OPT/install-pi.sh"
else
    install -m 0755 "$SRC/scripts/install-pi.sh" "$OPT/.install-pi.sh.new"
    sync "$OPT/.install-pi.sh.new"
    mv -T "$OPT/.install-pi.sh.new" "$OPT/install-pi.sh"
    note "copied $OPT/install-pi.sh (sudo bash $OPT/install-pi.sh --uninstall removes da3-edge)"
fi
if cmp -s "$SRC/systemd/$FINISH_UNIT.service" "$UNIT_DIR/$FINISH_UNIT.service"; then
    note "unchanged: $UNIT_DIR/$FINISH_UNIT.service"
else
    install -m 0644 "$SRC/systemd/$FINISH_UNIT.service" "$UNIT_DIR/.$FINISH_UNIT.service.new"
    mv -T "$UNIT_DIR/.$FINISH_UNIT.service.new" "$UNIT_DIR/$FINISH_UNIT.service"
    note "installed $UNIT_DIR/$FINISH_UNIT.service (settles an update cut short, at boot)"
fi
[ "$(systemctl is-enabled "$FINISH_UNIT" 2>/dev/null || true)" = enabled ] \
    || systemctl enable "$FINISH_UNIT" 2>&1 | sed 's/^/    /'
commit staged
record_begin
note "$RECORD: what is in service now, kept until this run stands"

# da3-edge on every user's PATH, looking at the service's models and store unless told
# otherwise (DA3_EDGE_MODELS, DA3_EDGE_STORE, or the flags).
cat >"$TMP/da3-edge" <<WRAPPER
#!/bin/sh
# da3-edge for every user of this machine (written by install-pi.sh): the service's
# models and frame store unless DA3_EDGE_MODELS / DA3_EDGE_STORE or flags say otherwise.
: "\${DA3_EDGE_MODELS:=$MODELS}" "\${DA3_EDGE_STORE:=/run/da3-edge}"
export DA3_EDGE_MODELS DA3_EDGE_STORE
exec $VENV/bin/da3-edge "\$@"
WRAPPER
if cmp -s "$TMP/da3-edge" "$BIN_LINK"; then
    note "unchanged: $BIN_LINK"
else
    put_file "$TMP/da3-edge" "$BIN_LINK" -m 0755
    note "installed $BIN_LINK (da3-edge for every user)"
fi

# A command as the service user, which runs outside the unit's sandbox here: in a session
# of its own with stdin from /dev/null (root's terminal out of its reach: no TIOCSTI into
# root's shell), and with no user site (PYTHONNOUSERSITE: its home is the state folder it
# writes, where a planted .pth would run as code). No weight cache (its own is the unit's
# CacheDirectory).
as_service() {
    runuser -u "$USER_NAME" -- setsid --wait env HOME="$STATE" PYTHONNOUSERSITE=1 \
        DA3_EDGE_WEIGHT_CACHE=off "$@" </dev/null
}

step "ExecuTorch runner (--stages executorch, no torch)"
# A new venv starts from the service's runner: install-executorch keeps it when its
# record (the runtime's version, ABI and the runner source's SHA-256) still matches.
if [ "$NEW" != "$CUR" ] && [ -n "$CUR" ] && [ -d "$CUR/share/da3-edge" ] && [ ! -e "$NEW/share/da3-edge" ]; then
    mkdir -p "$NEW/share"
    cp -a "$CUR/share/da3-edge" "$NEW/share/"
fi
# The pinned executorch wheel's C++ runtime (SHA-256 checked) and da3-edge's runner built
# against it here, in the venv, outside what uv manages; unchanged when already built.
# The daemon runs without it (numpy stages), so a failure here ends the install only
# with --require-executorch; install-executorch records why, and doctor shows it.
if et_out=$("$NEW/bin/da3-edge" install-executorch 2>"$TMP/executorch.err"); then
    sed 's/^/    /' "$TMP/executorch.err"
    note "$et_out"
elif [ $REQUIRE_ET -eq 1 ]; then
    die "install-executorch failed: $(tail -n 1 "$TMP/executorch.err")"
else
    echo "$PROG: warning: ExecuTorch runner not built ($(tail -n 1 "$TMP/executorch.err" | sed 's/^da3-edge: error: //')); the numpy stages will run; retry: sudo $VENV/bin/da3-edge install-executorch" >&2
fi

find "$NEW" -maxdepth 1 -name '*.lock' -type f -perm /022 -exec chmod go-w {} +

# ---------------------------------------------------------------------------- models, built
# From DA3's release file, with the new program (numpy, no torch), as root into root's
# folder: the release came whole and hash-checked (the hub's SHA-256, or --weights-sha256),
# and its reader is da3-edge's own bounded one. The cores the config needs; then they are
# installed like any models (checked, as the service user, before they replace any).
RELEASE=$CACHE/release
if [ -n "$BUILD_FROM" ]; then
    step "models: built from DA3's release"
    started=$SECONDS
    install -d -m 0755 "$CACHE"
    # Kept in $RELEASE (readable by the service user, whose models --verify reads it): a
    # later size is built from it with no download, and the check finds it. (sed -u: each
    # progress line as it comes.)
    if [ "$BUILD_FROM" = hub ]; then
        "$NEW/bin/da3-edge" models fetch --out "$RELEASE" ${WEIGHTS_SHA256:+--sha256 "$WEIGHTS_SHA256"} \
            2>&1 | sed -u 's/^/    /'
    elif ! cmp -s "$BUILD_FROM/model.safetensors" "$RELEASE/model.safetensors"; then
        rm -rf "$RELEASE.new"
        mkdir -p "$RELEASE.new"
        cp -- "$BUILD_FROM/model.safetensors" "$RELEASE.new/"
        [ ! -f "$BUILD_FROM/config.json" ] || cp -- "$BUILD_FROM/config.json" "$RELEASE.new/"
        rm -rf "$RELEASE"
        mv -T "$RELEASE.new" "$RELEASE"
    fi
    chmod -R u=rwX,go=rX "$RELEASE"
    weights=$(sha256sum "$RELEASE/model.safetensors" | cut -d' ' -f1)
    note "release in $RELEASE, SHA-256 $weights ($((SECONDS - started)) s)"
    build_config=${CONFIG_FILE:-$CONFIG}
    if [ ! -f "$build_config" ]; then
        build_config=$TMP/default.toml
        "$NEW/bin/da3-edge" run --print-default-config >"$build_config"
    fi
    started=$SECONDS
    built=$(mktemp -d "$OPT/.models-built.XXXXXX")
    # Over a copy of the models in service when they are this release's: a core that
    # comes out the same keeps its entry, and the same models install as unchanged.
    if grep -q "\"sha256:$weights\"" "$MODELS/manifest.json" 2>/dev/null; then
        for f in "$MODELS"/manifest.json "$MODELS"/*.tflite "$MODELS"/*.pte; do
            [ ! -f "$f" ] || cp -p -- "$f" "$built/"
        done
    fi
    "$NEW/bin/da3-edge" models build --weights "$RELEASE" --for-config "$build_config" \
        --out "$built" 2>&1 | sed -u 's/^/    /'
    note "built in $((SECONDS - started)) s"
    NEW_MODELS=$built
fi

# ---------------------------------------------------------------------------- models, installed
# listed_files DIR: manifest.json, then each file DIR's manifest lists (a plain name),
# a line each; the manifest's own checks come later (models --verify).
listed_files() {
    python3 -I -c 'import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as fh:
        names = [a.get("file") for a in json.load(fh)["artifacts"]]
except (OSError, ValueError, KeyError, TypeError, AttributeError):
    names = []
print("manifest.json")
for name in names:
    if isinstance(name, str) and name and "/" not in name and "\n" not in name and name not in (".", ".."):
        print(name)' "$1/manifest.json"
}
stage_models() {  # stage_models SRC STAGE: the manifest and the files it lists, each a
    # plain file (root copies them, then makes them readable to all): never a link,
    # nothing else from the folder; what else is there is named.
    local f name unlisted=()
    [ ! -L "$1/manifest.json" ] || die "$1/manifest.json: a link: refused"
    while IFS= read -r name; do
        f=$1/$name
        [ -e "$f" ] || [ -L "$f" ] || continue
        { [ -f "$f" ] && [ ! -L "$f" ]; } || die "$f: not a plain file: refused"
        cp -- "$f" "$2/"
    done < <(listed_files "$1")
    for f in "$1"/*.tflite "$1"/*.pte; do
        { [ -e "$f" ] || [ -L "$f" ]; } && [ ! -e "$2/${f##*/}" ] && unlisted+=("${f##*/}")
    done
    [ ${#unlisted[@]} -eq 0 ] || note "not in its manifest, not copied: ${unlisted[*]}"
}
same_models() {  # same model files, same bytes?
    local a=$1 b=$2 f
    [ -d "$b" ] || return 1
    diff -q <(cd "$a" && ls -1 manifest.json ./*.tflite ./*.pte 2>/dev/null | sed 's|^\./||' | sort) \
        <(cd "$b" && ls -1 manifest.json ./*.tflite ./*.pte 2>/dev/null | sed 's|^\./||' | sort) >/dev/null || return 1
    for f in "$a"/manifest.json "$a"/*.tflite "$a"/*.pte; do
        [ -e "$f" ] || continue
        cmp -s "$f" "$b/$(basename "$f")" || return 1
    done
}
CHANGED_MODELS=0
# An older install's models, in the service user's directory: renamed (rename(2) follows
# no link) into a folder only root can enter, then made root's own, so nothing can change
# them from then on (a process of the service user's whose working directory is inside
# still reaches the folder, not through its path: the folder's owner and mode stop it);
# of what is there, plain files with one name are staged like any models, the rest
# (links, hard links to other files) dropped, and the service's copy is gone either way.
if [ -e "$OLD_MODELS" ] || [ -L "$OLD_MODELS" ]; then
    step "models: out of $STATE"
    HOLD=$(mktemp -d /var/lib/.da3-edge-models.XXXXXX)
    mv -T "$OLD_MODELS" "$HOLD/models"
    if [ -d "$HOLD/models" ] && [ ! -L "$HOLD/models" ]; then
        chown root:root "$HOLD/models"
        chmod 0700 "$HOLD/models"
        dropped=$(find "$HOLD/models" -mindepth 1 \( ! -type f -o -links +1 \) -printf '%P ' \
            -prune -exec rm -rf {} +)
        [ -z "$dropped" ] || note "dropped (not a plain file): $dropped"
        if [ -z "$NEW_MODELS" ] && [ ! -e "$MODELS/manifest.json" ]; then
            NEW_MODELS=$HOLD/models
            note "moving $OLD_MODELS (the service user's) to $MODELS (root's)"
        else
            note "removed $OLD_MODELS (the service user's); the models live in $MODELS"
        fi
    else
        note "removed $OLD_MODELS: not a folder"
    fi
fi
if [ -n "$NEW_MODELS" ]; then
    step "models -> $MODELS"
    if same_models "$NEW_MODELS" "$MODELS"; then
        note "unchanged: same files as $NEW_MODELS"
    else
        stage=$(mktemp -d "$OPT/.models-new.XXXXXX")
        stage_models "$NEW_MODELS" "$stage"
        chmod 0755 "$stage"
        chmod 0644 "$stage"/*
        # Checked (sizes, SHA-256, each core model loads) before it replaces anything, as
        # the service user: LiteRT parses files that came from elsewhere, not as root.
        as_service "$NEW/bin/da3-edge" models --verify --models "$stage" | sed 's/^/    /'
        commit models-staged
        if [ -d "$MODELS" ]; then
            # Kept until the run stands: a later step's failure, a rollback, a kill or a
            # power cut puts it back (the record names it before it moves).
            rm -rf "$OPT"/.models-old.*  # a run cut short left it; the models in place stay
            MODELS_BEFORE="$OPT/.models-old.$$"
            record_set models "$MODELS_BEFORE"
            mv -T "$MODELS" "$MODELS_BEFORE"
            commit models-out
            mv -T "$stage" "$MODELS" || die "cannot move the new models into place"
        else
            mv -T "$stage" "$MODELS"
        fi
        commit models
        CHANGED_MODELS=1
        note "installed"
    fi
    if [ -n "$MODELS_URL" ]; then
        [ "$(cat "$MODELS/.tar-sha256" 2>/dev/null)" = "$MODELS_SHA256" ] \
            || echo "$MODELS_SHA256" >"$MODELS/.tar-sha256"
    else
        rm -f "$MODELS/.tar-sha256"
    fi
fi
if [ -f "$MODELS/manifest.json" ]; then
    step "models check"
    "$NEW/bin/da3-edge" models --models "$MODELS" | sed 's/^/    /'
else
    step "models"
    note "none in $MODELS yet: the service will not start without them."
    note "Add some with --models DIR or --models-url URL --models-sha256 HEX (docs/how-to/raspberry-pi.md)."
fi

# ---------------------------------------------------------------------------- config
CHANGED_UNIT=0  # a unit file or drop-in written: daemon-reload, restarts
step "config $CONFIG"
install -d -m 0755 "$ETC"
if [ -n "$CONFIG_FILE" ]; then
    DA3_EDGE_MODELS=$MODELS "$NEW/bin/da3-edge" run --config "$CONFIG_FILE" --check-config >/dev/null
    if cmp -s "$CONFIG_FILE" "$CONFIG"; then
        note "unchanged: same as $CONFIG_FILE"
    else
        if [ -e "$CONFIG" ]; then
            cp -p "$CONFIG" "$CONFIG.old"
            note "the previous config kept as $CONFIG.old"
        fi
        put_file "$CONFIG_FILE" "$CONFIG" -m 0644
        commit config
        note "installed from $CONFIG_FILE"
    fi
elif [ -e "$CONFIG" ]; then
    note "exists: left as it is"
else
    "$NEW/bin/da3-edge" run --print-default-config >"$TMP/da3-edge.toml"
    put_file "$TMP/da3-edge.toml" "$CONFIG" -m 0644
    note "created from da3-edge run --print-default-config"
fi
DA3_EDGE_MODELS=$MODELS "$NEW/bin/da3-edge" run --config "$CONFIG" --check-config | sed 's/^/    /'

if [ "$NEW" != "$CUR" ] && [ -n "$CUR" ] && [ -f "$MODELS/manifest.json" ]; then
    # Before anything of the version in service is replaced (its units, its venv link):
    # the new version's own doctor, as the service user (its LiteRT loads one of the
    # models), with a store of its own. A blocking problem ends the run here.
    step "doctor (the new version)"
    doctor_store=$(mktemp -d /tmp/da3-edge-doctor.XXXXXX)
    chown "$USER_NAME:" "$doctor_store"
    if ! as_service "$NEW/bin/da3-edge" doctor --models "$MODELS" --store "$doctor_store" \
        >"$TMP/doctor.txt" 2>&1; then
        rm -rf "$doctor_store"
        sed 's/^/    /' "$TMP/doctor.txt"
        problem=$(grep -m 1 '^FAIL' "$TMP/doctor.txt" | sed 's/^FAIL  *//; s/   */: /' || true)
        die "the new da3-edge's doctor found a blocking problem (${problem:-see above}): not switched, $(basename "$CUR") stays in service"
    fi
    rm -rf "$doctor_store"
    note "the new version's doctor: $(tail -n 1 "$TMP/doctor.txt")"
fi

if [ -n "$SERVE_USERS" ]; then
    step "serve on the LAN"
    if cmp -s "$SERVE_USERS" "$ETC/serve-users"; then
        note "unchanged: $ETC/serve-users"
    else
    put_file "$SERVE_USERS" "$ETC/serve-users" -o "${COMPANIONS[0]}" -g "$USER_NAME" -m 0600
        note "installed $ETC/serve-users (readable by ${COMPANIONS[0]} only)"
    fi
    lan=$UNIT_DIR/da3-edge-serve.service.d/lan.conf
    mkdir -p "$(dirname "$lan")"
    if cmp -s "$SRC/systemd/serve-lan.conf" "$lan"; then
        note "unchanged: $lan"
    else
        put_file "$SRC/systemd/serve-lan.conf" "$lan" -m 0644
        CHANGED_UNIT=1
        note "installed $lan (loopback, link-local, 10/8, 172.16/12, 192.168/16, fc00::/7)"
    fi
fi

# ---------------------------------------------------------------------------- unit
step "units"
sync_dir() {  # replace $2 by a copy of $1 unless they already match
    if [ -d "$2" ] && diff -rq "$1" "$2" >/dev/null 2>&1; then
        note "unchanged: $2"
        return
    fi
    rm -rf "$2.new"
    cp -r "$1" "$2.new"
    chmod -R u=rwX,go=rX "$2.new"
    rm -rf "$2"
    mv "$2.new" "$2"
    note "copied $2"
}
if [ -d "$OPT/docs" ]; then  # an older install's copy: the docs live with the source
    rm -rf "$OPT/docs"
    note "removed $OPT/docs"
fi
sync_dir "$SRC/systemd" "$OPT/systemd"
for unit in "${UNITS[@]}"; do
    if cmp -s "$SRC/systemd/$unit.service" "$UNIT_DIR/$unit.service"; then
        note "unchanged: $UNIT_DIR/$unit.service"
    else
        put_file "$SRC/systemd/$unit.service" "$UNIT_DIR/$unit.service" -m 0644
        CHANGED_UNIT=1
        note "installed $UNIT_DIR/$unit.service"
    fi
    if [[ " ${ENABLE[*]} " != *" $unit "* ]]; then
        note "$unit installed, not enabled (configure [mqtt], then systemctl enable --now $unit)"
    elif [ "$(systemctl is-enabled "$unit" 2>/dev/null || true)" = enabled ]; then
        note "$unit enabled already"
    else
        systemctl enable "$unit" 2>&1 | sed 's/^/    /'
    fi
done
commit units

# ---------------------------------------------------------------------------- switch
step "switch"
PREVIOUS=""  # the venv that was in service, to go back to
if [ "$NEW" = "$CUR" ]; then
    note "in service already: $NEW"
else
    if [ -n "$CUR" ] && [ ! -L "$VENV" ]; then  # an older install's venv, made in place
        CUR=$VENVS/$(date -u +%Y%m%dT%H%M%SZ)-before
        record_set venv "$CUR"
        mv -T "$VENV" "$CUR"
    fi
    [ -L "$VENV" ] || rm -rf "$VENV"  # one cut short: nothing to go back to
    point "$VENV" "$NEW"
    commit switch
    PREVIOUS=$CUR
    note "$VENV -> venvs/$(basename "$NEW")${PREVIOUS:+ (before: $(basename "$PREVIOUS"))}"
fi

step "service"
# A unit restarted and up (READY, for the daemon's Type=notify) within --ready-timeout s.
restart_within() {
    systemctl reset-failed "$1" 2>/dev/null || true
    SINCE=$(date '+%Y-%m-%d %H:%M:%S')
    STARTED=$SECONDS
    timeout "$READY_TIMEOUT" systemctl restart "$1" && systemctl is-active --quiet "$1"
}
why_down() {  # how a unit's last start ended, and what its program said of it since
    local result status lines log
    result=$(systemctl show -p Result --value "$1" 2>/dev/null || true)
    status=$(systemctl show -p ExecMainStatus --value "$1" 2>/dev/null || true)
    lines=$(journalctl "_SYSTEMD_UNIT=$1.service" --since "$SINCE" -o cat --no-pager 2>/dev/null || true)
    log=$(printf '%s\n' "$lines" | grep -E '^(ERROR|CRITICAL) |: error: ' | tail -n 1 || true)
    [ -n "$log" ] || log=$(printf '%s\n' "$lines" | tail -n 1)
    echo "$1: ${result:-no result}${status:+ (exit status $status)}${log:+: $log}"
}
RESTARTED=()
rollback() {  # the venv, units, models and config this run replaced back, then the line why
    local waited=$((SECONDS - STARTED)) how
    how="it failed after $waited s"
    [ "$waited" -lt "$READY_TIMEOUT" ] || how="not up within $READY_TIMEOUT s, --ready-timeout"
    commit rollback
    put_back
    systemctl daemon-reload
    for unit in "${RESTARTED[@]}"; do
        restart_within "$unit" || echo "$PROG: warning: after the rollback, $(why_down "$unit")" >&2
    done
    die "rolled back to $(basename "$PREVIOUS"): the new da3-edge did not come up ($how): $1"
}
up() {  # up UNIT start|restart; a switched venv is given --ready-timeout, or rolled back
    RESTARTED+=("$1")
    if [ -n "$PREVIOUS" ]; then
        restart_within "$1" || rollback "$(why_down "$1")"
    else
        systemctl "$2" "$1" || die "$1 did not $2: journalctl -u $1 -n 50"
    fi
}
if [ ! -d /run/systemd/system ]; then
    note "systemd is not running here (a chroot or an image): enabled, starts at boot"
else
    [ $CHANGED_UNIT -eq 1 ] && systemctl daemon-reload
    if [ $START -eq 0 ]; then
        note "--no-start: not (re)started; sudo systemctl restart da3-edge when ready"
    elif [ ! -f "$MODELS/manifest.json" ]; then
        note "not started: no models yet"
    elif systemctl is-active --quiet da3-edge; then
        if [ $((CHANGED_PROGRAM + CHANGED_MODELS + CHANGED_UNIT)) -gt 0 ]; then
            up da3-edge restart
            note "restarted"
        else
            note "running; nothing changed"
        fi
    else
        up da3-edge start
        note "started"
    fi
    # serve needs no models: it says what the daemon is doing, or that it is not.
    if [ $START -eq 1 ]; then
        if ! systemctl is-active --quiet da3-edge-serve; then
            up da3-edge-serve start
            note "da3-edge-serve started (http://127.0.0.1:8000/)"
        elif [ $((CHANGED_PROGRAM + CHANGED_UNIT)) -gt 0 ]; then
            up da3-edge-serve restart
            note "da3-edge-serve restarted"
        fi
    fi
    # publish runs only where someone enabled it; a new program or unit restarts it.
    if [ $START -eq 1 ] && systemctl is-active --quiet da3-edge-publish \
        && [ $((CHANGED_PROGRAM + CHANGED_UNIT)) -gt 0 ]; then
        up da3-edge-publish restart
        note "da3-edge-publish restarted"
    fi
    systemctl --no-pager --lines=0 status da3-edge da3-edge-serve | sed 's/^/    /' || true
fi

# The run stands (the record says so first): the models it replaced go (the config's
# copy stays as .old); the venv before the switch stays (venv-before); any other venv
# (older, or one cut short) goes.
[ ! -d "$RECORD" ] || record_set phase up
commit up
MODELS_BEFORE=""
settle
if [ -n "$PREVIOUS" ]; then
    note "the one before kept: $VENV_BEFORE -> venvs/$(basename "$PREVIOUS")"
fi
for old in "$VENVS"/*; do
    [ -e "$old" ] || continue
    [ "$old" = "$(readlink -f "$VENV")" ] || [ "$old" = "$(readlink -f "$VENV_BEFORE")" ] && continue
    rm -rf "$old"
    note "removed $old (neither in service nor the one before)"
done

echo "==> done: frames appear in /run/da3-edge while the service runs."
echo "    Check: systemctl status da3-edge; $VENV/bin/da3-edge doctor"
# Where the page is, from what is installed (not this run's flags): the LAN when serve's
# drop-in lets it in, its login is there and the config listens beyond loopback.
serve_host=$("$VENV/bin/da3-edge" config get serve.host --config "$CONFIG" 2>/dev/null || true)
serve_port=$("$VENV/bin/da3-edge" config get serve.port --config "$CONFIG" 2>/dev/null || echo 8000)
if [ -f "$UNIT_DIR/da3-edge-serve.service.d/lan.conf" ] && [ -f "$ETC/serve-users" ] \
    && [ -n "$serve_host" ] && [ "${serve_host#127.}" = "$serve_host" ] && [ "$serve_host" != ::1 ]; then
    echo "    Live view: http://$(hostname).local:$serve_port/ or http://ADDRESS:$serve_port/ (hostname -I) from the LAN,"
    echo "    as $(cut -d: -f1 "$ETC/serve-users") with the password da3-edge card printed"
else
    echo "    Live view: http://127.0.0.1:$serve_port/ on this machine (da3-edge-serve; elsewhere: systemd/README.md)"
fi
