"""The Python programs the VM tests carry as text (they run inside the guest, minutes
into a CI run): compiled here first, so a broken one fails in a second, not after
two boots."""

from __future__ import annotations

import pytest

from . import test_vm


@pytest.mark.parametrize("name", ["SOURCE", "CAPTURE"])
def test_the_vm_programs_compile(name: str) -> None:
    text = getattr(test_vm, name).replace("_SMALL_", "(182, 136)")
    compile(text, f"{name.lower()}.py", "exec")
