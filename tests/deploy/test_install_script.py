"""`scripts/serve.sh` installs only what changed: `scripts/install.sh --if-needed` returns at once while .venv holds an
install of this pyproject.toml and install script (a full reinstall took 28 s of every start of the service)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path) -> Path:
    """A checkout's install inputs, and a .venv with a real interpreter and console script (no activate script:
    an install that does start stops at once, before pip)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(REPO / "scripts" / "install.sh", root / "scripts" / "install.sh")
    shutil.copy(REPO / "scripts" / "serve.sh", root / "scripts" / "serve.sh")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (root / ".venv" / "bin" / "toolscout").symlink_to(Path(sys.executable).parent / "toolscout")
    return root


def _install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "scripts" / "install.sh"), *args], capture_output=True, text=True, timeout=60
    )


def _stamp(root: Path) -> None:
    """What a finished install writes (the script's own last line)."""
    crc = subprocess.run(
        "cat pyproject.toml scripts/install.sh | cksum", shell=True, cwd=root, capture_output=True, text=True
    )
    (root / ".venv" / ".toolscout-installed").write_text(crc.stdout)


def test_serve_installs_only_when_the_install_inputs_changed(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    assert "\nscripts/install.sh --if-needed\n" in (root / "scripts" / "serve.sh").read_text()
    # Never installed here: it installs (and stops at the missing activate script, before pip).
    done = _install(root, "--if-needed")
    assert done.returncode != 0 and ".venv/bin/activate" in done.stderr
    _stamp(root)
    started = time.perf_counter()
    done = _install(root, "--if-needed")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "Toolscout is installed in .venv (pyproject.toml unchanged since; scripts/install.sh installs again)\n"
    )
    assert time.perf_counter() - started < 5
    # Without the option, or once pyproject.toml changes, it installs again.
    assert _install(root).returncode != 0
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# a dependency changed\n")
    done = _install(root, "--if-needed")
    assert done.returncode != 0 and ".venv/bin/activate" in done.stderr
