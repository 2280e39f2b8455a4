# shellcheck shell=bash
# Boot 2, after check.sh (its snapshot taken): `da3-edge update` as the owner runs it
# over SSH, from wheels the host made (/job/wheels): the next version, which must keep
# /etc/da3-edge (config, credentials) and the models (SHA-256 before and after) and
# write frames; then one whose daemon exits before READY, with models, rolled back (the
# models before it back); then refusals
# (the first version again, a wrong hash). Between those, an update killed in its READY
# wait and the boot after it. Set before it: VM_USER, READY_S, FRAME_WAIT_S, NEXT,
# BROKEN, HANGING, FIRST (the wheels' names).
out=/job
update_as_owner() {  # NAME ARGS...: `sudo da3-edge update ARGS` as the Imager user, and the state after
    name=$1
    shift
    runuser -l "$VM_USER" -c "sudo da3-edge update $*" >$out/update-$name.txt 2>&1
    echo $? >$out/update-$name.rc
    state "$name"
    mark "update $name: exit $(cat $out/update-$name.rc)"
}
state() {  # state NAME: the links, the venvs, the version, the units, the record
    {
        echo "venv -> $(readlink /opt/da3-edge/venv)"
        echo "venv-before -> $(readlink /opt/da3-edge/venv-before)"
        echo "venvs: $(ls /opt/da3-edge/venvs | tr '\n' ' ')"
        da3-edge --version
        systemctl is-active da3-edge da3-edge-serve
        echo "record: $(cat /opt/da3-edge/.update/phase 2>/dev/null || echo none)"
    } >$out/update-$1.state 2>&1
}
kept() { sha256sum /etc/da3-edge/* /opt/da3-edge/models/*; }
kept >$out/update-kept-before.txt
update_as_owner start /job/wheels/$NEXT --ready-timeout $READY_S
kept >$out/update-kept-after.txt
# A frame from the next version: written after its update returned.
touch /tmp/updated
n=0
until [ -n "$(find /run/da3-edge/frames -mindepth 1 -maxdepth 1 -newer /tmp/updated | head -n 1)" ] \
    || [ $n -ge "$FRAME_WAIT_S" ]; do
    sleep 1
    n=$((n + 1))
done
echo "newer frames: $(find /run/da3-edge/frames -mindepth 1 -maxdepth 1 -newer /tmp/updated | wc -l), waited $n s" \
    >$out/update-frames.txt
mark "a frame of the next version, or the deadline (waited $n s)"
# The broken one brings models too (the same, the manifest written again: other bytes);
# its rollback puts the models before it back.
mkdir -p /tmp/models-other
cp /opt/da3-edge/models/*.tflite /opt/da3-edge/models/*.pte /tmp/models-other/
python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=1)' \
    /opt/da3-edge/models/manifest.json /tmp/models-other/manifest.json
update_as_owner broken /job/wheels/$BROKEN --ready-timeout $READY_S --models /tmp/models-other
kept >$out/update-kept-broken.txt
# An update cut short while it waits for READY (a power cut then): a build whose daemon
# holds before READY, with models; the installer and what it started SIGKILLed in the
# wait. Then what the next boot does, under this systemd: the units stopped (the cut took
# them), multi-user.target's transaction as at boot, where
# da3-edge-finish-update.service (--recover: the record is there) runs before the units.
runuser -l "$VM_USER" -c "sudo da3-edge update /job/wheels/$HANGING --ready-timeout $READY_S --models /tmp/models-other" \
    >$out/update-killed.txt 2>&1 &
n=0
until journalctl -u da3-edge -b -o cat --no-pager | grep -q 'holding before READY' || [ $n -ge "$READY_S" ]; do
    sleep 1
    n=$((n + 1))
done
mark "the held daemon, or the deadline (waited $n s)"
pkill -KILL -f 'install-pi.sh|da3-edge update|systemctl restart da3-edge' || true
for fd in /proc/[0-9]*/fd/*; do  # anything else still holding the installer's lock
    [ "$(readlink "$fd" 2>/dev/null)" = /run/da3-edge-install.lock ] || continue
    pid=${fd#/proc/}
    kill -KILL "${pid%%/*}" 2>/dev/null || true
done
wait
state killed-cut
echo "waited $n s" >>$out/update-killed-cut.state
systemctl kill --signal=KILL da3-edge da3-edge-serve || true
systemctl stop da3-edge-serve da3-edge
timeout "$READY_S" systemctl start multi-user.target
echo $? >$out/update-killed-boot.rc
for unit in da3-edge-finish-update da3-edge; do
    systemctl show -p ExecMainStartTimestampMonotonic -p ExecMainExitTimestampMonotonic -p Result "$unit" \
        | sed "s/^/$unit /"
done >$out/update-killed.order
journalctl -u da3-edge-finish-update -b -o cat --no-pager >$out/update-killed-finish.txt 2>&1
state killed
kept >$out/update-kept-killed.txt
mark "the update killed in its READY wait, and the boot after it"
update_as_owner older /job/wheels/$FIRST
update_as_owner wronghash /job/wheels/$NEXT --sha256 "$(printf '0%.0s' $(seq 64))"
journalctl -u da3-edge -b --no-pager -o cat | tail -n 40 >$out/update-journal.txt
