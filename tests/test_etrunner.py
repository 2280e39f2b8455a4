"""The torch-free ExecuTorch runner (edge.etrunner): install, load, run, refuse.

Against the real ExecuTorch runtime libraries of the pinned wheel, built by
`da3-edge install-executorch`, on the small test models' real .pte programs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge import etrunner
from edge.errors import EdgeError, ModelCorrupt
from edge.etrunner import install
from edge.models import STAGE_KINDS, Manifest, da3_shape
from edge.stages import bands
from scripts.support import ROOT, children
from scripts.support.tools import run_cli


def test_version_is_the_export_environments() -> None:
    """The runtime that runs the programs is the release that wrote them."""
    pins = (ROOT / "requirements" / "export.txt").read_text()
    assert f"executorch=={etrunner.EXECUTORCH_VERSION}" in pins
    for wheel in install.WHEELS.values():
        assert wheel.filename.startswith(f"executorch-{etrunner.EXECUTORCH_VERSION}-")
        assert re.fullmatch(r"[0-9a-f]{64}", wheel.sha256)


def test_runner_abi_matches_the_binding() -> None:
    source = etrunner.runner_source().decode()
    assert f"constexpr int kAbi = {etrunner.ABI};" in source


@pytest.mark.arm
def test_runtime_links_no_torch(executorch_runtime: Path) -> None:
    """What install-executorch keeps: the runner and four runtime libraries, none of
    which needs libtorch (ELF NEEDED entries, read from the files)."""
    libs = sorted(p.name for p in (executorch_runtime / "executorch" / "lib").iterdir())
    assert libs == sorted(install.LIBS)
    record = json.loads((executorch_runtime / "runtime.json").read_text())
    assert record["executorch"] == etrunner.EXECUTORCH_VERSION
    for path in [
        executorch_runtime / "runner.so",
        *(executorch_runtime / "executorch/lib").iterdir(),
    ]:
        needed = _elf_needed(path.read_bytes())
        assert needed, path
        assert not [n for n in needed if re.match(r"lib(torch|c10)", n)], (path, needed)


def _elf_needed(data: bytes) -> list[str]:
    """DT_NEEDED names of a 64-bit little-endian ELF shared object."""
    import struct

    assert data[:4] == b"\x7fELF" and data[4] == 2
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    dynamic = next(s for s in sections if s[1] == 6)  # SHT_DYNAMIC
    strtab = sections[dynamic[6]]  # sh_link
    names = []
    for off in range(dynamic[4], dynamic[4] + dynamic[5], 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            start = strtab[4] + value
            names.append(data[start : data.index(b"\0", start)].decode())
    return names


def test_programs_run_and_match_executorchs_own_bindings(
    executorch_runtime: Path, export_env: Path, small_models: Path
) -> None:
    """Our runner and ExecuTorch's Python bindings (torch) run the same programs on the
    same inputs: the same numbers. The bindings run in the export environment."""
    manifest = Manifest.load(small_models)
    pre = manifest.verify(manifest.find_stage("pre", (140, 182)))
    post = manifest.verify(manifest.find_stage("post", (140, 182)))
    rng = np.random.default_rng(0)
    rgb = (rng.random((301, 397, 3)) * 255).astype(np.uint8)
    core = da3_shape(301, 397)
    plan = bands.plan((301, 397), core)
    buffer = np.empty(plan.strips[0].rows.size * 397 * 3, dtype=np.float32)
    pre_in = plan.inputs(rgb, plan.strips[0], buffer)  # one run: the first strip
    depth, conf = (rng.random((140, 182), dtype=np.float32) + 0.5 for _ in range(2))
    post_in = bands.post_inputs(depth, conf, bands.post_plan((140, 182), (257, 311)))
    inputs = ROOT / ".cache" / "tests" / "etrunner-inputs.npz"
    inputs.parent.mkdir(parents=True, exist_ok=True)
    np.savez(inputs, *pre_in, *post_in)
    theirs = ROOT / ".cache" / "tests" / "etrunner-bindings.npz"
    proc = children.run("executorch-bindings", pre, post, inputs, theirs, python=export_env)
    assert proc.returncode == 0, proc.stderr
    runtime = etrunner.Runtime.get()
    with np.load(theirs) as ref:
        (a,) = etrunner.Program(pre, runtime).run(pre_in)
        pre_d = float(np.abs(a - ref["pre"]).max())
        (b,) = etrunner.Program(post, runtime).run(post_in)
        post_d = float(np.abs(b - ref["post"]).max())
    print(f"runner vs ExecuTorch's bindings: pre max|d| {pre_d:.2e}, post max|d| {post_d:.2e}")
    columns = -(-core[1] // bands.PRE_ROWS) * bands.PRE_ROWS  # the bands' tail uncut
    assert a.shape == (3, bands.STRIP * bands.PRE_ROWS, columns)  # the first strip
    assert b.shape == (2 * 17, bands.POST_ROWS, 20 * bands.POST_ROWS)  # 257 rows, 311 columns
    assert pre_d <= 1e-5 and post_d <= 1e-5


def test_executorch_stages_import_no_torch_where_torch_is_installed(
    executorch_runtime: Path, export_env: Path, small_models: Path, tmp_path: Path
) -> None:
    """In the export environment (torch and executorch installed), the ExecuTorch stages
    leave torch and executorch out of sys.modules and libtorch out of the memory map."""
    from PIL import Image

    photo = tmp_path / "p.png"
    rng = np.random.default_rng(1)
    Image.fromarray((rng.random((480, 640, 3)) * 255).astype(np.uint8)).save(photo)
    env = {**os.environ, etrunner.ENV_RUNTIME: str(executorch_runtime)}
    proc = children.run("torch-free-stages", small_models, photo, python=export_env, env=env)
    print(proc.stdout.strip())
    assert proc.returncode == 0, proc.stderr
    assert "modules: [] libs: [] stages: executorch" in proc.stdout


def _photo(tmp_path: Path) -> Path:
    from PIL import Image

    path = tmp_path / "grey.png"
    Image.new("RGB", (64, 48), (128, 128, 128)).save(path)
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"executorch": "1.4.0"}, "built for executorch 1.4.0, this da3-edge needs 1.5.1"),
        ({"runner_sha256": "0" * 64}, "built from another da3-edge's source"),
    ],
)
def test_a_runner_for_another_version_is_refused(
    executorch_runtime: Path, tmp_path: Path, edit: dict[str, str], message: str
) -> None:
    copy = tmp_path / "rt"
    shutil.copytree(executorch_runtime, copy, symlinks=True)
    record = json.loads((copy / "runtime.json").read_text())
    (copy / "runtime.json").write_text(json.dumps({**record, **edit}))
    proc = children.run("etrunner-status", env={**os.environ, etrunner.ENV_RUNTIME: str(copy)})
    assert proc.returncode == 0, proc.stderr
    assert "(False, " in proc.stdout and message in proc.stdout
    assert "da3-edge install-executorch" in proc.stdout


@pytest.mark.arm
def test_unloadable_and_foreign_programs_are_model_corrupt(
    executorch_runtime: Path, small_models: Path, tmp_path: Path
) -> None:
    runtime = etrunner.Runtime.get()
    junk = tmp_path / "junk.pte"
    junk.write_bytes(b"not a program" * 100)
    with pytest.raises(ModelCorrupt, match=r"junk.pte: ExecuTorch cannot load it \(cannot load"):
        etrunner.Program(junk, runtime)
    # An old model folder whose pre program takes other inputs (here: the post program's).
    folder = tmp_path / "models"
    shutil.copytree(small_models, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    pre = next(a for a in manifest["artifacts"] if a["kind"] == "pre")
    post = next(a for a in manifest["artifacts"] if a["kind"] == "post")
    shutil.copyfile(folder / post["file"], folder / pre["file"])
    pre.update(bytes=post["bytes"], sha256=post["sha256"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    proc = run_cli(
        [
            "snap",
            str(_photo(tmp_path)),
            "--stages",
            "executorch",
            "--models",
            str(folder),
            "-o",
            str(tmp_path / "out"),
        ]
    )
    assert proc.returncode == 1
    assert "a pre program of another da3-edge version" in proc.stderr
    assert "re-export the model directory" in proc.stderr


@pytest.mark.arm
def test_thread_count_is_set_before_programs_open(
    executorch_runtime: Path, small_models: Path
) -> None:
    """Resizing ExecuTorch's pool under an open program crashed the process (SIGSEGV in
    the pool): it is refused instead; before any program opens it works."""
    proc = children.run("etrunner-threads", small_models, 140, 182)
    assert proc.returncode == 0, proc.stderr
    assert "refused: the ExecuTorch thread pool already runs 1 threads" in proc.stdout
    assert "kept 1" in proc.stdout and "ExecuTorch stages keep 1 threads" in proc.stderr
    assert "threads 2" in proc.stdout


@pytest.fixture(scope="session")
def pinned_wheel() -> Path:
    """The host's pinned wheel, from the user's cache (install-executorch put it there;
    session-scoped, so it sees the real cache, not a test's private one)."""
    return install.fetch_wheel(install.WHEELS[install.host_platform()])


def test_install_checks_the_wheel_and_is_idempotent(
    executorch_runtime: Path, pinned_wheel: Path, tmp_path: Path
) -> None:
    """A second install changes nothing; a tampered or misnamed wheel is refused before
    anything is written; no compiler and cross builds without one are one line each."""
    path, changed = install.install(executorch_runtime)
    assert (path, changed) == (executorch_runtime, False)
    tampered = tmp_path / pinned_wheel.name
    shutil.copyfile(pinned_wheel, tampered)
    with zipfile.ZipFile(tampered, "a") as z:
        z.writestr("extra.txt", "x")
    dest = tmp_path / "dest"
    with pytest.raises(EdgeError, match="not the pinned wheel"):
        install.install(dest, wheel=tampered)
    with pytest.raises(EdgeError, match="expected the pinned"):
        install.install(dest, wheel=tmp_path)
    with pytest.raises(EdgeError, match="cannot read the wheel"):
        install.install(dest, wheel=tmp_path / "gone" / pinned_wheel.name)
    with pytest.raises(EdgeError, match=r"no C\+\+ compiler 'no-such-c\+\+'"):
        install.install(dest, cxx="no-such-c++")
    other = "aarch64" if install.host_platform() == "x86_64" else "x86_64"
    with pytest.raises(EdgeError, match="needs a cross compiler"):
        install.install(dest, target=other)
    assert not dest.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]
    # The last failure stays beside the destination, for doctor to say why and what next.
    with pytest.raises(EdgeError, match=r"no C\+\+ compiler"):
        install.install(dest, cxx="no-such-c++")
    env = {**os.environ, etrunner.ENV_RUNTIME: str(dest)}
    status = children.run("etrunner-status", "message", env=env)
    assert status.stdout.strip() == (
        "the executorch stages need da3-edge's ExecuTorch runner; the last `da3-edge "
        "install-executorch` failed (no C++ compiler 'no-such-c++' to build the ExecuTorch "
        "runner (Debian / Raspberry Pi OS: sudo apt install g++)): fix that and run `da3-edge "
        "install-executorch` (no torch needed), or use --stages numpy"
    ), status.stdout + status.stderr


def test_install_builds_a_working_runner(
    executorch_runtime: Path, pinned_wheel: Path, tmp_path: Path
) -> None:
    """A fresh install into a new directory (the cached wheel, the system compiler)."""
    cached = pinned_wheel
    etrunner.failure_note(tmp_path / "rt").write_text("an earlier attempt failed\n")
    proc = run_cli(["install-executorch", "--dest", str(tmp_path / "rt"), "--wheel", str(cached)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"installed: {tmp_path / 'rt'}"
    assert not etrunner.failure_note(tmp_path / "rt").exists()  # a success clears it
    assert "building runner.so with" in proc.stderr
    env = {**os.environ, etrunner.ENV_RUNTIME: str(tmp_path / "rt")}
    status = children.run("etrunner-status", env=env)
    assert "(True, 'runner for executorch 1.5.1" in status.stdout, status.stdout + status.stderr
    again = run_cli(["install-executorch", "--dest", str(tmp_path / "rt"), "--wheel", str(cached)])
    assert again.returncode == 0 and again.stdout.strip() == f"unchanged: {tmp_path / 'rt'}"


@pytest.mark.arm
def test_stage_programs_plan_little_memory(executorch_runtime: Path, small_models: Path) -> None:
    """The pre program uses the caller's buffers in place (no planned input) and plans
    its intermediates at its bounds; the post program's at 2048 a side out of a 528 core
    (address space: a run touches what its sizes need, and gives it back after)."""
    manifest = Manifest.load(small_models)
    runtime = etrunner.Runtime.get()
    pre = etrunner.Program(manifest.verify(manifest.find_stage("pre", (140, 182))), runtime)
    post = etrunner.Program(manifest.verify(manifest.find_stage("post", (140, 182))), runtime)
    mib = (pre.planned_bytes / 2**20, post.planned_bytes / 2**20)
    print(f"planned: pre {mib[0]:.1f} MiB, post {mib[1]:.1f} MiB")
    assert 0 < mib[0] <= 32 and 0 < mib[1] <= 80


def _without_programs(models: Path, dest: Path, kinds: tuple[str, ...] = STAGE_KINDS) -> Path:
    """A copy of ``models`` without its ``kinds`` programs (all: as exported with
    --no-stages), neither the files nor in the manifest."""
    shutil.copytree(models, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    for artifact in [a for a in manifest["artifacts"] if a["kind"] in kinds]:
        (dest / artifact["file"]).unlink()
        manifest["artifacts"].remove(artifact)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_auto_runs_the_executorch_stages_where_installed_else_numpy(
    executorch_runtime: Path, small_models: Path, tmp_path: Path
) -> None:
    """The default, stages = "auto": a still's record names the ExecuTorch stages where
    the runner and the folder's programs are installed, numpy where either is missing;
    doctor says which and why."""
    photo = _photo(tmp_path)
    bare = _without_programs(small_models, tmp_path / "bare")
    older = _without_programs(small_models, tmp_path / "older", ("pre1",))  # an earlier export
    cases = {
        "installed": (small_models, {}, "executorch", "auto runs executorch (auto: da3-edge's"),
        "no runner": (
            small_models,
            {"DA3_EDGE_EXECUTORCH": str(tmp_path / "none")},
            "numpy",
            "auto runs numpy (auto: the executorch stages need da3-edge's ExecuTorch "
            "runner, not installed in",
        ),
        "no programs": (
            bare,
            {},
            "numpy",
            "auto runs numpy (auto: " + f"{bare} has no stage "
            "programs (exported with --no-stages))",
        ),
        "no pre1": (
            older,
            {},
            "numpy",
            f"auto runs numpy (auto: {older}: no ExecuTorch pre1 "
            "program for 140x182; `da3-edge models build` (without --no-stages) writes them",
        ),
    }
    for case, (models, env, backend, doctor_says) in cases.items():
        out = tmp_path / case.replace(" ", "-")
        proc = run_cli(["snap", str(photo), "--models", str(models), "-o", str(out)], extra_env=env)
        assert proc.returncode == 0, proc.stderr
        record = json.loads((out / "grey.json").read_text())
        doctor = run_cli(["doctor", "--models", str(models), "--json"], extra_env=env)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        print(f"{case}: record {record['stages']}; doctor: {checks['stages']['detail']}")
        assert record["stages"] == backend, case
        assert checks["stages"]["detail"].startswith(doctor_says), checks["stages"]
