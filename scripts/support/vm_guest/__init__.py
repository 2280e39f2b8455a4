"""Programs the VM tests run inside the guest (tests/test_vm.py), from the checkout the
guest mounts at /opt/src, with the guest's Python: by path, as
``python3 /opt/src/scripts/support/vm_guest/NAME.py ...``."""
