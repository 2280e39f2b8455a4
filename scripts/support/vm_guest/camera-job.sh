# shellcheck shell=bash
# The camera's set-up in the VM, and its parts: sourced into a job's run.sh
# (scripts/support/vm.py ``job``); the job's files are in /job.
mkdir -p /job/frames /opt/picamera2 /opt/src
mount -t 9p -o trans=virtio,version=9p2000.L,ro picamera2 /opt/picamera2
mount -t 9p -o trans=virtio,version=9p2000.L,ro src /opt/src
part() { name=$1; shift; "$@" >/job/$name.txt 2>&1; echo $? >/job/$name.rc; mark "part $name"; }

# libcamera has no camera until its virtual pipeline handler's YAML is in place.
virtual_camera() {
    mkdir -p /usr/share/libcamera/pipeline/virtual
    cp /job/virtual.yaml /usr/share/libcamera/pipeline/virtual/virtual.yaml
}

# picamera2 where a Pi's apt would put it (the venv sees the system's packages, and
# python3-libcamera there), behind the test set-up's patches (scripts/support/vm_picamera2).
# PY: the installer's venv.
PYPATH=/opt/src/scripts/support/vm_picamera2:/opt/picamera2
# shellcheck disable=SC2034  # PY: read by the parts sourced after this one
PY=/opt/da3-edge/venv/bin/python

# daemon FRAMES [WAIT]: the unit (re)started with the picamera2 config, until FRAMES
# frames are published (or WAIT s have passed, default 240), then stopped; the frames, the last
# status.json and the journal go to /job. The last part of a job (set -e).
daemon() {
    set -e
    systemctl stop da3-edge
    cp /job/da3-edge.toml /etc/da3-edge/da3-edge.toml
    # What Raspberry Pi OS's udev rules do for its heaps (group video): Debian leaves
    # the system heap root's alone.
    chgrp video /dev/dma_heap/system /dev/udmabuf
    chmod 660 /dev/dma_heap/system /dev/udmabuf
    # The changes to the unit: picamera2 on its path (see PYPATH); keep the store after
    # stop, for its last status.json; and a watchdog for emulation (under TCG one frame
    # takes tens of seconds even at the VM's small core, where the unit's WatchdogSec=30
    # expects well under 15).
    mkdir -p /etc/systemd/system/da3-edge.service.d
    printf '[Service]\nEnvironment=PYTHONPATH=%s\nRuntimeDirectoryPreserve=yes\nWatchdogSec=900\n' \
        $PYPATH >/etc/systemd/system/da3-edge.service.d/test.conf
    systemctl daemon-reload
    systemctl start da3-edge
    n=0
    until [ "$(published)" -ge "$1" ] || [ $n -ge "${2:-240}" ]; do
        sleep 1; n=$((n + 1))
    done
    echo "waited $n s for $(published) frames"
    systemctl show -p ActiveState -p NRestarts -p StatusText da3-edge
    echo "memory.peak: $(cat /sys/fs/cgroup/system.slice/da3-edge.service/memory.peak)"
    ls /run/da3-edge/frames
    cp -r /run/da3-edge/frames /job/daemon-frames
    systemctl stop da3-edge
    cp /run/da3-edge/status.json /job/status.json
    journalctl -u da3-edge --no-pager -o cat | tail -n 60
}
