# shellcheck shell=bash
# Run in the VM after each boot, as root (tests/test_vm.py): cloud-init's verdict, then
# what the boot left, into /job. Set before it: BOOT (1: wait for the fake camera's
# first frames; 2: for the unit to be up), INSTALL_S, FRAMES, FRAME_WAIT_S, UP_WAIT_S,
# VM_USER, SERVE_AUTH.
out=/job
timeout ${INSTALL_S} cloud-init status --wait --long >$out/cloud-init.txt 2>&1
echo $? >$out/cloud-init.rc  # 124: cloud-init had not finished (or never started)
mark "cloud-init done"
# A first boot cut short goes on after cloud-init is done (da3-edge-first-boot.service):
# the install has ended when the first-boot script's last line says how (a cut run
# wrote FAILED as it was stopped; the run that goes on starts a new line after it).
ended() {
    grep "^da3-edge first boot: " /var/log/da3-edge-install.log 2>/dev/null | tail -n 1 \
        | grep -qE "^da3-edge first boot: (installed|FAILED)"
}
n=0
until ended || [ $n -ge "$INSTALL_S" ]; do
    sleep 1; n=$((n + 1))
done
mark "the first boot's install ended, or the deadline (waited $n s)"
# The user-data the card holds, checked by this cloud-init's own schema (the VM's 25.1).
cloud-init schema --system >$out/schema.txt 2>&1
echo $? >$out/schema.rc
# Is MemoryMax= enforced at all, and is doctor ready: both beside the wait below (the
# daemon's core uses one of the two CPUs; these take most of a minute emulated).
{
    # A transient unit asks for 256 MiB under a 64 MiB limit.
    systemd-run --wait -p MemoryMax=64M -p MemorySwapMax=0 /usr/bin/python3 -c \
        'x = b"1" * (256 << 20); print("allocated", len(x))' >$out/oom.txt 2>&1
    echo $? >$out/oom.rc
    runuser -u da3-edge -- env DA3_EDGE_MODELS=/opt/da3-edge/models \
        /opt/da3-edge/venv/bin/da3-edge doctor >$out/doctor.txt 2>&1
    echo $? >$out/doctor.rc
    mark "beside: MemoryMax and doctor checked"
} &
beside=$!
case "$BOOT" in
1)  # the fake camera's first frames
    n=0
    until [ "$(published)" -ge "$FRAMES" ] || [ $n -ge "$FRAME_WAIT_S" ]; do
        sleep 1; n=$((n + 1))
    done
    mark "$FRAMES frame(s) of the fake camera, or the deadline (waited $n s)" ;;
*)  # the unit up (its frames come from the camera's daemon after)
    n=0
    until systemctl is-active -q da3-edge || [ $n -ge "$UP_WAIT_S" ]; do
        sleep 1; n=$((n + 1))
    done
    mark "the unit active, or the deadline (waited $n s)" ;;
esac
wait $beside
ls -A /run/da3-edge/frames >$out/frames.txt 2>&1
cp /run/da3-edge/status.json $out/status.json 2>/dev/null
systemctl show -p ActiveState -p NRestarts -p MemoryMax -p MemoryPeak -p User da3-edge >$out/unit.txt
systemctl is-enabled da3-edge da3-edge-serve da3-edge-publish >$out/enabled.txt 2>&1
systemctl is-active da3-edge da3-edge-serve >$out/active.txt 2>&1
cg=/sys/fs/cgroup/system.slice/da3-edge.service
{
    echo "fs: $(stat -fc %T /sys/fs/cgroup)"
    for f in memory.max memory.peak memory.events; do echo "$f: $(tr '\n' ' ' <$cg/$f)"; done
} >$out/cgroup.txt 2>&1
# SERVE_AUTH (user:password): the card's LAN login, which every request then needs.
SERVE_AUTH=${SERVE_AUTH:-} python3 - >$out/healthz.txt 2>&1 <<'PY'
import base64, os, urllib.error, urllib.request
auth = os.environ["SERVE_AUTH"].encode()
headers = {"Authorization": "Basic " + base64.b64encode(auth).decode()} if auth else {}
request = urllib.request.Request("http://127.0.0.1:8000/healthz", headers=headers)
try:  # 200, or 503 once the newest frame is older than serve.max_age (10 s; a frame takes longer here)
    r = urllib.request.urlopen(request, timeout=30)
except urllib.error.HTTPError as e:
    r = e
print(r.status, r.read().decode().strip())
PY
{ id ${VM_USER}; hostname; ls /home; cat /home/${VM_USER}/.ssh/authorized_keys; } >$out/user.txt 2>&1
{ cat /etc/netplan/50-cloud-init.yaml; nmcli -t -f NAME,TYPE connection show; } >$out/network.txt 2>&1
cp /var/log/imager-runcmd.txt $out/ 2>/dev/null
cp /var/log/da3-edge-install.log /var/log/cloud-init-output.log $out/ 2>/dev/null
journalctl -u da3-edge -b --no-pager -o cat | tail -n 40 >$out/journal.txt
journalctl -u da3-edge-first-boot -b --no-pager | tail -n 20 >$out/first-boot-unit.txt
# Where the boot's time went, by systemd's and cloud-init's own accounts (printed by the
# test: the VM module is most of CI's time).
{
    systemd-analyze
    systemd-analyze blame | head -n 12
    cloud-init analyze blame | head -n 16
} >$out/boot-time.txt 2>&1
# What the install owns: content, owner, mode, link target (scripts/arm/installer-check.sh).
# Taken again at the end of boot 1 (owner.sh: its commands build a size), then compared;
# the daemon's own cache (which model files it has hashed, by their stat) is not the
# install's.
cd /
snapshot() {
    (
        cd /
        set -- opt/da3-edge etc/da3-edge etc/systemd/system var/lib/da3-edge \
            -path var/lib/da3-edge/.cache -prune -o
        find "$@" -type f -print0 | sort -z | xargs -0 sha256sum
        find "$@" -printf '%M %U:%G %p -> %l\n' | sort
        grep -E '^(da3-edge|${VM_USER}):' /etc/passwd /etc/group
    ) >$out/snapshot.txt
}
snapshot
# The models were built on the device: no torch in the venv.
/opt/da3-edge/venv/bin/python -c 'import importlib.util as u; print("torch:", u.find_spec("torch") is not None)' \
    >$out/torch.txt 2>&1
mark "checks written"
