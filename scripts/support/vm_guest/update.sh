# shellcheck shell=bash
# Boot 2, after check.sh (its snapshot taken): `da3-edge update` as the owner runs it
# over SSH, from wheels the host made (/job/wheels): the next version, which must keep
# /etc/da3-edge (config, credentials) and the models (SHA-256 before and after) and
# write frames; then one whose daemon exits before READY, with models, rolled back (the
# models before it back); then refusals
# (the first version again, a wrong hash). Set before it: VM_USER, READY_S,
# FRAME_WAIT_S, NEXT, BROKEN, FIRST (the wheels' names).
out=/job
update_as_owner() {  # NAME ARGS...: `sudo da3-edge update ARGS` as the Imager user, and the state after
    name=$1
    shift
    runuser -l "$VM_USER" -c "sudo da3-edge update $*" >$out/update-$name.txt 2>&1
    echo $? >$out/update-$name.rc
    {
        echo "venv -> $(readlink /opt/da3-edge/venv)"
        echo "venv-before -> $(readlink /opt/da3-edge/venv-before)"
        echo "venvs: $(ls /opt/da3-edge/venvs | tr '\n' ' ')"
        da3-edge --version
        systemctl is-active da3-edge da3-edge-serve
    } >$out/update-$name.state 2>&1
    mark "update $name: exit $(cat $out/update-$name.rc)"
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
update_as_owner older /job/wheels/$FIRST
update_as_owner wronghash /job/wheels/$NEXT --sha256 "$(printf '0%.0s' $(seq 64))"
journalctl -u da3-edge -b --no-pager -o cat | tail -n 40 >$out/update-journal.txt
