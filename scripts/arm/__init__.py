"""The aarch64 lane's Python helpers (scripts/arm-lane.sh runs them, some inside the
arm64 root under qemu-user)."""
