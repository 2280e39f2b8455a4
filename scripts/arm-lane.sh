#!/usr/bin/env bash
# The aarch64 lane: da3-edge's runtime on Debian bookworm arm64, under qemu-user with
# the Raspberry Pi 5's CPU model (Cortex-A76), on the same small DA3 model as the
# x86_64 tests. Correctness only: emulation is ~100x slower and its timings mean
# nothing, so none are reported.
#
#   scripts/arm-lane.sh            # everything (CI: scripts/check --then, beside the VM):
#                                  # prepare, then installer beside tests, snap, kernels
#   scripts/arm-lane.sh tests      # one step: prepare, tests, snap, kernels, installer
#
# Steps:
#   prepare  qemu-user-static + binfmt_misc (F flag), a bookworm arm64 root filesystem
#            from Debian's packages (mmdebstrap; a tarball kept per machine in
#            $DA3_EDGE_ROOTFS_CACHE, default ~/.cache/da3-edge/rootfs), the
#            locked runtime + test wheels for aarch64 (uv --python-platform), da3-edge,
#            its ExecuTorch runner (cross-built with g++-aarch64-linux-gnu).
#   tests    the tests marked arm (see arm_test_files below) on cortex-a76, strict.
#   snap     `da3-edge snap` on real photos, fp32/fp16/int8, on x86_64 and cortex-a76;
#            the ExecuTorch stages on the cross-built runner (seeded stage inputs, and
#            `snap --stages executorch`), x86_64 against cortex-a76;
#            the fp16 proof (the same fp16 artifact with the fp16 policy on and off);
#            cortex-a72 (Pi 4): fp16 policy off, and LiteRT's SIGILL there (no LSE
#            atomics) turned into a one-line error; `doctor` on both;
#            scripts/arm/compare.py checks and records it all (report.json).
#   kernels  which micro-kernels one forward runs on cortex-a76, per precision (fp32,
#            fp16 with fp16 arithmetic and without, int8) and for the ExecuTorch stages:
#            scripts/arm/kcount.c (a qemu TCG plugin) counts the blocks that ran,
#            scripts/support/kernels.py names them and checks that int8 reaches KleidiAI;
#            int8 again on qemu's `max` CPU, with i8mm and with SME (Apple M-series).
#   installer  scripts/arm/installer-check.sh: scripts/install-pi.sh, twice, in a fresh
#            copy of the root filesystem.
#   rss      (not run by default: ~25 min) where a still's memory goes on cortex-a76:
#            scripts/startup_breakdown.py on the full-size models, fp16 with XNNPACK's
#            fp16 arithmetic and without, int8; RSS only (it includes qemu's own, measured
#            beside it), written to docs/bench/startup-a76.json. Needs `prepare` first.
#   kernel-sizes  (not run by default) guest instructions of one fp16 forward on
#            cortex-a76 at each core size (KERNELS_MODELS, KERNELS_SHAPES): the price
#            table's A76 column (docs/bench/kernels-a76-sizes.json). Needs `prepare`.
#   build-count  (not run by default: ~1 min) guest instructions of `models build` on
#            cortex-a76: the default fp16 set from the seeded release, as an owner's Pi
#            runs it (docs/bench/build-a76.json). Needs `prepare`.
#
# qemu 7.2 (bookworm) shows the host's /proc/cpuinfo to the guest, which would make
# LiteRT's cpuinfo and our fp16 policy see an x86 CPU: each run binds a Raspberry Pi
# /proc/cpuinfo (scripts/arm/cpuinfo-pi{5,4}.txt) in a private mount namespace, with
# QEMU_CPU set to the matching model. Needs root (mounts, chroot, binfmt_misc).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LANE=${DA3_EDGE_ARM_CACHE:-$REPO/.cache/arm}
PACKAGES=python3,ca-certificates
# The root filesystem tarball is kept per machine, not per checkout (a clean clone reuses
# it), named by everything it is made from, and made anew after a week (Debian's updates).
ROOTFS_CACHE=${DA3_EDGE_ROOTFS_CACHE:-${HOME:-/root}/.cache/da3-edge/rootfs}
ROOTFS_TAR=$ROOTFS_CACHE/bookworm-arm64-minbase-${PACKAGES//,/+}.tar
ROOTFS_MAX_DAYS=7
ROOT=$LANE/root
OUT=$LANE/out
export UV_PYTHON_DOWNLOADS=never

# The tests that run on aarch64 are those marked `arm` (pytest -m arm), in the files that
# have any: the tests whose result can differ on Arm (native code, CPU-dependent
# behaviour). Pure-Python logic runs on x86_64 only. The rule, and each test file's lane
# and why, are in docs/arm.md ("Which tests run emulated"); tests/test_arm_lane.py keeps
# the table and the markers in step.
arm_test_files() { grep -lE 'pytest\.mark\.arm\b' tests/test_*.py; }

timed() {
    local name=$1; shift
    local start=$SECONDS
    echo "=== arm lane: $name"
    "$@"
    echo "--- arm lane: $name: $((SECONDS - start)) s"
}

# enter CPUINFO QEMU_CPU [VAR=VALUE...] -- CMD...: run CMD in the arm64 root, as on a Pi.
# (`python3 -m edge`, not the da3-edge script: uv --target wrote the host's Python into
# its shebang.)
enter() {
    local cpuinfo=$1 cpu=$2; shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    unshare --mount --propagation private -- bash -euc '
        root=$1 cpuinfo=$2 cpu=$3 repo=$4 nenv=$5; shift 5
        envs=("${@:1:$nenv}"); shift "$nenv"
        mount -t proc proc "$root/proc"
        mount --bind "$cpuinfo" "$root/proc/cpuinfo"
        mount --rbind /sys "$root/sys"   # cpuinfo (in LiteRT) reads /sys/devices/system/cpu
        mount --bind /dev "$root/dev"
        mount -t tmpfs tmpfs "$root/tmp"
        if [ -n "${LANE_HOST_LIBS:-}" ]; then   # a host (x86_64) program run in the root
            mkdir -p "$root/usr/lib/x86_64-linux-gnu" "$root/lib64"
            mount --bind /usr/lib/x86_64-linux-gnu "$root/usr/lib/x86_64-linux-gnu"
            mount --bind /lib64 "$root/lib64"
        fi
        mkdir -p "$root$repo"
        mount --bind "$repo" "$root$repo"   # same path inside: the test model cache matches
        exec chroot "$root" /usr/bin/env -i QEMU_CPU="$cpu" HOME=/root LANG=C.UTF-8 \
            PATH=/opt/da3-edge/site/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            PYTHONPATH=/opt/da3-edge/site PYTHONDONTWRITEBYTECODE=1 "${envs[@]}" "$@"
    ' enter "$ROOT" "$REPO/scripts/arm/$cpuinfo" "$cpu" "$REPO" "${#envs[@]}" "${envs[@]}" "$@"
}

a76() { enter cpuinfo-pi5.txt cortex-a76 "$@"; }
a72() { enter cpuinfo-pi4.txt cortex-a72 "$@"; }

# snap prints each image's time; emulated times mean nothing, so they are not shown.
no_times() { sed -E 's/: [0-9.]+ ms$/: done (emulated: time not reported)/'; }

ensure_binfmt() {
    scripts/install-host-packages.sh qemu-user-static mmdebstrap
    local fs=/proc/sys/fs/binfmt_misc
    [ -e "$fs/register" ] || mount -t binfmt_misc binfmt_misc "$fs"
    if [ ! -e "$fs/qemu-aarch64" ]; then
        # As /usr/lib/binfmt.d/qemu-aarch64.conf, with F: the interpreter is opened now,
        # so it works inside a chroot that does not contain it.
        local magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
        local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
        printf '%s' ":qemu-aarch64:M::$magic:$mask:/usr/bin/qemu-aarch64-static:F" >"$fs/register"
    fi
    grep -q '^enabled' "$fs/qemu-aarch64"
}

prepare() {
    ensure_binfmt
    scripts/install-host-packages.sh g++-aarch64-linux-gnu
    mkdir -p "$LANE" "$ROOTFS_CACHE"
    find "$ROOTFS_TAR" -mtime +"$ROOTFS_MAX_DAYS" -delete 2>/dev/null || true
    if [ ! -f "$ROOTFS_TAR" ]; then
        local partial=${ROOTFS_TAR%.tar}.partial.tar   # mmdebstrap picks the format by suffix
        rm -rf "$ROOTFS_TAR" "$partial"
        echo "building $ROOTFS_TAR (mmdebstrap; kept for $ROOTFS_MAX_DAYS days)"
        mmdebstrap --architectures=arm64 --variant=minbase --include="$PACKAGES" \
            bookworm "$partial" >"$LANE/mmdebstrap.log" 2>&1 \
            || { tail -20 "$LANE/mmdebstrap.log"; exit 1; }
        mv "$partial" "$ROOTFS_TAR"
    fi
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    tar -xf "$ROOTFS_TAR" -C "$ROOT"
    # Fallback for a binfmt registration without F (e.g. binfmt-support's own).
    cp /usr/bin/qemu-aarch64-static "$ROOT/usr/bin/"
    local reqs=$LANE/requirements.txt site=$ROOT/opt/da3-edge/site
    uv export --frozen --no-dev --group test --no-emit-project --no-hashes -o "$reqs" >/dev/null
    local py
    py=$(enter_python_version)
    uv pip install -q --target "$site" --python-platform aarch64-manylinux_2_28 \
        --python-version "$py" -r "$reqs"
    uv pip install -q --target "$site" --python-platform aarch64-manylinux_2_28 \
        --python-version "$py" --no-deps "$REPO"
    # The ExecuTorch runner for the root's Python (prefix /usr), cross-built here: the
    # root has no compiler. The pinned aarch64 wheel's runtime libraries, no torch.
    local et_dest
    et_dest=$ROOT$(uv run --frozen --no-sync python -c \
        'from edge import etrunner; print(etrunner.default_dir("/usr"))')
    uv run --frozen --no-sync da3-edge install-executorch --platform aarch64 \
        --cxx aarch64-linux-gnu-g++ --dest "$et_dest"
    # The models both lanes use: exported on the host if not current (scripts/support/models.py).
    uv run --frozen --no-sync python -m scripts.support.models small >"$LANE/models-path"
    uv run --frozen --no-sync python -m scripts.support.models weights >"$LANE/weights-path"
    a76 -- python3 -c 'import platform, edge; print("python", platform.python_version(), platform.machine(), "da3-edge", edge.__version__)'
}

enter_python_version() {
    a76 -- python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'
}

run_tests() {
    local files
    mapfile -t files < <(arm_test_files)
    # No --durations: emulated times mean nothing.
    a76 DA3_EDGE_STRICT_TESTS=1 -- python3 -m pytest -p no:cacheprovider -q -rfE -m arm \
        "${files[@]/#/$REPO/}"
}

run_snap() {
    local models photos
    models=$(cat "$LANE/models-path")
    rm -rf "$OUT"
    mkdir -p "$OUT"
    photos=$OUT/photos
    uv run --frozen --no-sync python -m scripts.arm.compare photos "$photos"
    local p
    for p in fp32 fp16 int8; do
        uv run --frozen --no-sync da3-edge snap --models "$models" --precision "$p" \
            --threads 2 -o "$OUT/x86_64-$p" "$photos"
        a76 -- python3 -m edge snap --models "$models" --precision "$p" --threads 2 \
            -o "$OUT/a76-$p" "$photos" 2>&1 | no_times
    done
    # The ExecuTorch stages on da3-edge's runner (no torch in the root): stage outputs on
    # seeded inputs, and a still end to end, on both.
    uv run --frozen --no-sync python -m scripts.arm.compare stages "$models" "$OUT/stages-x86_64.npz"
    a76 PYTHONPATH="/opt/da3-edge/site:$REPO" -- python3 -m scripts.arm.compare stages "$models" "$OUT/stages-a76.npz"
    uv run --frozen --no-sync da3-edge snap --models "$models" --precision fp32 --threads 2 \
        --stages executorch -o "$OUT/x86_64-fp32-executorch" "$photos"
    a76 -- python3 -m edge snap --models "$models" --precision fp32 --threads 2 \
        --stages executorch -o "$OUT/a76-fp32-executorch" "$photos" 2>&1 | no_times
    run_build "$models" "$photos"
    # The fp16 proof: the same fp16 artifact, fp16 arithmetic forced off on the A76.
    a76 DA3_EDGE_FP16_ARITHMETIC=0 -- python3 -m edge snap --models "$models" --precision fp16 \
        --threads 2 -o "$OUT/a76-fp16-policy-off" "$photos" 2>&1 | no_times
    # A Pi 4 (Cortex-A72: no FP16 arithmetic, no LSE atomics). LiteRT's aarch64 build
    # dies with SIGILL there; da3-edge must say so in one line instead (exit 1), and
    # doctor must report the fp16 policy off.
    set +e
    a72 -- python3 -m edge snap --models "$models" --precision fp16 --threads 2 \
        -o "$OUT/a72-fp16" "$photos" >"$OUT/a72-snap.txt" 2>&1
    echo "exit=$?" >>"$OUT/a72-snap.txt"
    local fp16_model
    fp16_model=$(ls "$models"/*_fp16.tflite | head -1)
    a72 PYTHONPATH="/opt/da3-edge/site:$REPO" -- python3 -m scripts.arm.litert_load "$fp16_model" >"$OUT/a72-litert.txt" 2>&1
    echo "exit=$?" >>"$OUT/a72-litert.txt"
    set -e
    a76 -- python3 -m edge doctor --models "$models" --json >"$OUT/doctor-a76.json" || true
    a72 -- python3 -m edge doctor --models "$models" --json >"$OUT/doctor-a72.json" || true
    uv run --frozen --no-sync da3-edge doctor --models "$models" --json \
        >"$OUT/doctor-x86_64.json" || true
    uv run --frozen --no-sync python -m scripts.arm.compare check "$OUT"
}

# The Pi makes its own models: `models build` from the seeded release (the one the small
# models were exported from) in the root, where there is no torch, byte-equal to the
# x86_64 build and to the export; then a still with the built core and the ExecuTorch
# stages, whose depth compare.py checks against the exported core's (a76-fp16), and
# `models --verify` on the A76, whose forward check compare.py reads.
run_build() {
    local models=$1 photos=$2 weights shape core
    local small='from scripts.support.models import SMALL_SHAPE as s; print(f"{s[0]}x{s[1]}")'
    weights=$(cat "$LANE/weights-path")
    shape=$(uv run --frozen --no-sync python -c "$small")
    core="da3-small_${shape}_fp16.tflite"
    uv run --frozen --no-sync da3-edge models build --weights "$weights" --shape "$shape" \
        --out "$OUT/built-x86_64"
    a76 -- python3 -m edge models build --weights "$weights" --shape "$shape" \
        --out "$OUT/built-a76" 2>&1 | sed -E 's/ in [0-9.]+ s/ (emulated: time not reported)/'
    cmp "$OUT/built-a76/$core" "$OUT/built-x86_64/$core"
    cmp "$OUT/built-a76/$core" "$models/$core"
    echo "built on the A76: $core, the x86_64 build's and the export's bytes"
    a76 -- python3 -m edge snap --models "$OUT/built-a76" --precision fp16 --threads 2 \
        --stages executorch -o "$OUT/a76-fp16-built" "$photos" 2>&1 | no_times
    # The device checks what it built: a 42x56 core against numpy's DA3 (compare.py
    # reads the result).
    a76 -- python3 -m edge models --models "$OUT/built-a76" --verify \
        >"$OUT/built-a76-verify.txt" 2>&1 || true
    cat "$OUT/built-a76-verify.txt"
}

run_installer() {
    scripts/arm/installer-check.sh "$ROOTFS_TAR" "$(cat "$LANE/models-path")" "$(cat "$LANE/weights-path")"
}

# kcount_build OUT: OUT emptied, the kernel-count plugin built into it, and the root's
# plugin-loading qemu (see run_kernels).
kcount_build() {
    scripts/install-host-packages.sh qemu-user gcc
    rm -rf "$1"
    mkdir -p "$1"
    gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$1/kcount.so" scripts/arm/kcount.c
    cp --remove-destination /usr/bin/qemu-aarch64 "$ROOT/usr/local/bin/qemu-aarch64-plugins"
}

# kcount_run OUT QEMU_CPU MODELS DIR ARGS...: `kernels.py run MODELS DIR ARGS` on
# QEMU_CPU under OUT's plugin, its counts in DIR/counts.txt.
kcount_run() {
    local out=$1 cpu=$2 models=$3 dir=$4; shift 4
    LANE_HOST_LIBS=1 a76 PYTHONPATH="/opt/da3-edge/site:$REPO" -- \
        /usr/local/bin/qemu-aarch64-plugins -cpu "$cpu" \
        -plugin "$out/kcount.so,out=$dir/counts.txt" \
        /usr/bin/python3 -m scripts.support.kernels run "$models" "$dir" "$@"
}

# Which micro-kernels a forward runs on the A76, per precision, and the ExecuTorch
# stages': Bookworm's dynamic qemu-aarch64 (it loads TCG plugins; the static one the
# lane otherwise uses cannot) with scripts/arm/kcount.c counting every block that ran.
# Then int8 alone on qemu's `max` CPU with SME off (i8mm, as an Apple M2/M3) and on
# (SME, as an M4): KleidiAI's families for those (scripts/support/kernels.py WANTED).
# KERNELS_MODELS picks the models (default the small test ones), KERNELS_OUT the output,
# KERNELS_CONFIGS the A76's runs: by default those the check needs (fp32 and fp16 with
# the fp16 policy off run the same kernels, and fp32 costs the lane most); docs/arm.md's
# table is all of them on the full-size models (see there). The lane counts one cold
# forward per config (kernels.py run --cold): the families reached are what it checks;
# KERNELS_WARM=1 counts a warm forward after a first one, as the table does.
run_kernels() {
    local models=${KERNELS_MODELS:-$(cat "$LANE/models-path")} out=${KERNELS_OUT:-$OUT/kernels}
    local configs=${KERNELS_CONFIGS:-fp16,int8,stages} cold=1
    [ "${KERNELS_WARM:-0}" = 1 ] && cold=
    kcount_build "$out"
    local run
    for run in "a76 cortex-a76 $configs" "i8mm max,sme=off int8" "sme max int8"; do
        set -- $run
        mkdir -p "$out/$1"
        kcount_run "$out" "$2" "$models" "$out/$1" --configs "$3" ${cold:+--cold}
        uv run --frozen --no-sync python -m scripts.support.kernels report "$out/$1" --root "$ROOT"
        uv run --frozen --no-sync python -m scripts.support.kernels check "$out/$1/report.json" \
            --cpu "$1"
    done
}

# The price of each core size on the A76 (not run by default; by hand, after prepare):
# guest instructions of one warm fp16 forward (fp16 arithmetic, one thread) per shape,
# from KERNELS_MODELS, a folder holding those fp16 cores (`da3-edge export --shape
# 378x504 --shape 294x392 --shape 210x280 --precision fp16`). A relative cost, never a
# time. Each size is counted in its own emulator, KERNELS_JOBS at a time (default: one
# per core): a count does not depend on what runs beside it. The report goes to
# KERNELS_OUT/report.json (docs/bench/kernels-a76-sizes.json).
run_kernel_sizes() {
    local models=${KERNELS_MODELS:?KERNELS_MODELS: a folder with an fp16 core of each size}
    local out=${KERNELS_OUT:-$OUT/kernel-sizes} shapes=${KERNELS_SHAPES:-378x504,294x392,210x280}
    local jobs=${KERNELS_JOBS:-$(nproc)}
    kcount_build "$out"
    local shape dir dirs=()
    for shape in ${shapes//,/ }; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        dir=$out/a76-$shape
        dirs+=("$dir")
        mkdir -p "$dir"
        (
            rc=0
            kcount_run "$out" cortex-a76 "$models" "$dir" --configs fp16 --shapes "$shape" \
                >"$dir/log.txt" 2>&1 || rc=$?
            echo "$rc" >"$dir/rc"
            echo "kernel-sizes: $shape counted (exit $rc, $dir/log.txt)"
        ) &
    done
    wait
    for dir in "${dirs[@]}"; do
        [ "$(cat "$dir/rc")" = 0 ] || { cat "$dir/log.txt" >&2; return 1; }
    done
    uv run --frozen --no-sync python -m scripts.support.kernels report "${dirs[@]}" --root "$ROOT" \
        --json "$out/report.json" >/dev/null
    echo "kernel-sizes: $out/report.json"
}

# What `models build` costs on the A76 (not run by default; by hand, after prepare): the
# guest instructions of one build of the default fp16 set (size 504, four aspects, and
# the stage programs) from the seeded release the lane's models come from. A relative
# cost, never a time; docs/performance.md turns it into a Pi 5 estimate.
run_build_count() {
    local out=${KERNELS_OUT:-$OUT/build-count} json=${BUILD_COUNT_JSON:-}
    kcount_build "$out"
    mkdir -p "$out/a76-build"
    kcount_run "$out" cortex-a76 "$(cat "$LANE/models-path")" "$out/a76-build" \
        --configs build --weights "$(cat "$LANE/weights-path")"
    rm -rf "$out/a76-build/built"
    uv run --frozen --no-sync python -m scripts.support.kernels report "$out/a76-build" \
        --root "$ROOT" --json "${json:-$out/report.json}"
}

run_rss() {
    local models
    models=$(uv run --frozen --no-sync python -m scripts.support.models full)
    # qemu's own memory, to read the figures against: a Python that imports numpy and
    # Pillow, natively and emulated.
    local probe='import resource, numpy, PIL.Image; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)'
    local native emulated
    native=$(uv run --frozen --no-sync python -c "$probe")
    emulated=$(a76 -- python3 -c "$probe")
    echo "baseline peak RSS (python + numpy + Pillow): x86_64 $((native / 1024)) MiB, cortex-a76 under qemu $((emulated / 1024)) MiB"
    # Run from the checkout (the child snaps import this edge/, not the root's copy).
    a76 -- /bin/sh -c "cd '$REPO' && exec python3 -m scripts.startup_breakdown --models '$models' \
        --precision fp16,int8 --rounds 1 --fp16-arithmetic --json docs/bench/startup-a76.json \
        --baseline-kib $native,$emulated"
}

# beside STEP: start STEP now, in the background, its output kept; `joined` waits for it,
# prints its output and fails the lane if it failed.
BESIDE_PID=
beside() {
    BESIDE_LOG=$LANE/$1.log BESIDE_STEP=$1
    # Its own process group (setsid), so a failing lane can stop all of it.
    setsid "$REPO/scripts/arm-lane.sh" "$1" >"$BESIDE_LOG" 2>&1 &
    BESIDE_PID=$!
    echo "=== arm lane: $1 started beside the steps below (output when it ends)"
}
joined() {
    local rc=0
    wait "$BESIDE_PID" || rc=$?
    BESIDE_PID=
    cat "$BESIDE_LOG"
    [ "$rc" = 0 ] || { echo "arm lane: $BESIDE_STEP failed (exit $rc)" >&2; exit "$rc"; }
}
trap '[ -z "$BESIDE_PID" ] || kill -- "-$BESIDE_PID" 2>/dev/null || true' EXIT

steps=("$@")
# By default the installer check runs beside the other steps: it has its own copy of the
# root, and spends much of its time on downloads (apt, PyPI) and one-core work (dpkg, uv,
# a compiler). Measured (2026-12-03, AVX-512 host): the steps one after another 998 s,
# with the installer beside 881 s (it slows the tests step from 372 s to 600 s).
[ ${#steps[@]} -gt 0 ] || steps=(prepare installer-beside tests snap kernels joined)
for step in "${steps[@]}"; do
    case $step in
        installer-beside) beside installer ;;
        joined) joined ;;
        prepare) timed prepare prepare ;;
        tests) timed "runtime tests on cortex-a76" run_tests ;;
        snap) timed "snap: x86_64 vs cortex-a76, fp16 proof, doctor" run_snap ;;
        installer) timed "install-pi.sh in the arm64 root" run_installer ;;
        kernels) timed "which micro-kernels run: cortex-a76, qemu max (i8mm, SME)" run_kernels ;;
        rss) timed "where a still's memory goes on cortex-a76" run_rss ;;
        kernel-sizes) timed "guest instructions per forward, per core size: cortex-a76" run_kernel_sizes ;;
        build-count) timed "guest instructions of models build: cortex-a76" run_build_count ;;
        *) echo "arm-lane.sh: unknown step $step (prepare, tests, snap, kernels, installer, rss, kernel-sizes, build-count)" >&2; exit 2 ;;
    esac
done
