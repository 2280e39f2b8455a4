# shellcheck shell=bash
# Boot 2 of tests/test_vm.py, after check.sh and camera-job.sh: the camera's turn on
# the installed system. Set before it: W, H (the virtual camera's size), SMALL (the
# small stream the daemon asks for, WxH), DAEMON_FRAMES, DAEMON_WAIT_S. The fake
# camera's daemon is stopped first: its frames under TCG would take the CPU the parts
# need.
systemctl stop da3-edge

libcamera() {
    echo "heaps: $(ls /dev/dma_heap) udmabuf: $(ls /dev/udmabuf)"
    uname -r
    cam --list
    python3 /opt/src/scripts/support/vm_guest/capture.py "$W" "$H"
}

source() {
    PYTHONPATH=$PYPATH PYTHONDONTWRITEBYTECODE=1 $PY /opt/src/scripts/support/vm_guest/source.py \
        "$W" "$H" "$SMALL" "$@"
}

part nocamera source none  # before the virtual camera exists: what a Pi without one says
virtual_camera
part libcamera libcamera
part source source open
part wrongindex source index1  # a Pi 5's second connector, empty here
part controls source controls
part small source small
part cpu source cpu
part daemon daemon "$DAEMON_FRAMES" "$DAEMON_WAIT_S"
