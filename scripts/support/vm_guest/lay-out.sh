# shellcheck shell=bash
# No installer ran (python -m scripts.vm_camera): the checkout's da3-edge with the
# locked dependencies (share "deps") as the installer lays it out, user, venv path,
# unit, config directory and models, so that ``daemon`` finds what it would on a Pi.
# Sourced after camera-job.sh.
mkdir -p /opt/deps
mount -t 9p -o trans=virtio,version=9p2000.L,ro deps /opt/deps
PYPATH=$PYPATH:/opt/src:/opt/deps
# shellcheck disable=SC2034  # PY: read by the parts sourced after this one
PY=/usr/bin/python3
useradd --system --no-create-home --shell /usr/sbin/nologin da3-edge
install -d /opt/da3-edge/venv/bin /etc/da3-edge /opt/da3-edge/models
# The venv's da3-edge: this Python (PYTHONPATH from the unit's drop-in, see daemon).
printf '#!/bin/sh\nexec /usr/bin/python3 -m edge "$@"\n' >/opt/da3-edge/venv/bin/da3-edge
chmod 755 /opt/da3-edge/venv/bin/da3-edge
cp /opt/src/systemd/da3-edge.service /etc/systemd/system/
cp /job/models/* /opt/da3-edge/models/
systemctl daemon-reload
