# shellcheck shell=bash
# Boot 1, after check.sh: the owner's side of the card, as the Imager user in a login
# shell (what an SSH session gets), into /job. Set before it: VM_USER, FRAME_WAIT_S,
# PROBE_WAIT_S, SIZES (two core sizes: the config's, then another, whose core the set
# builds from the release the first boot kept).
out=/job
# The host reaches serve through qemu's forwarded port (the card's password, none, a
# wrong one) once asked; the guest waits for its answer file, with a deadline.
touch $out/probe-now
n=0
until [ -e $out/probed ] || [ $n -ge "$PROBE_WAIT_S" ]; do sleep 1; n=$((n + 1)); done
mark "the host probed serve, or the deadline (waited $n s)"
as_owner() {  # as_owner NAME COMMAND: its output and status in /job/owner-NAME.*
    runuser -l "$VM_USER" -c "$2" >$out/owner-$1.txt 2>&1
    echo $? >$out/owner-$1.rc
}
as_owner doctor 'da3-edge doctor'
as_owner latest 'ls /run/da3-edge/latest'
as_owner get 'da3-edge config get camera.fps'
# A bad value: refused in one line, the file's SHA-256 unchanged.
sha256sum /etc/da3-edge/da3-edge.toml >$out/config-sha-before.txt
as_owner fast 'sudo da3-edge config set camera.fps fast'
sha256sum /etc/da3-edge/da3-edge.toml >$out/config-sha-after.txt
# The other size, with a reload: its core built first (the release is on the Pi), then
# the next frames come from it.
small=${SIZES% *} other=${SIZES#* }
as_owner size "sudo da3-edge config set model.size $other --reload"
mark "model.size $other set"
size_now() { python3 -c 'import json; print(json.load(open("/run/da3-edge/latest/frame.json"))["size"])' 2>/dev/null; }
n=0
until [ "$(size_now)" = "$other" ] || [ $n -ge "$FRAME_WAIT_S" ]; do sleep 1; n=$((n + 1)); done
size_now >$out/size-after.txt
mark "a frame of size $other, or the deadline (waited $n s)"
systemctl show -p NRestarts -p ActiveState da3-edge >$out/size-unit.txt
journalctl -u da3-edge -b --no-pager -o cat | grep -i reload >$out/size-journal.txt
# Back as it was (the second boot compares what the install owns with this boot's, as
# it is now: the other size's core, built by the set above, stays).
as_owner size-back "sudo da3-edge config set model.size $small --reload"
sha256sum /etc/da3-edge/da3-edge.toml >$out/config-sha-end.txt
snapshot
mark "owner's commands done"
