"""`scripts/serve.sh` takes `toolscout serve`'s --port and --host: `scripts/serve.sh --port 8791` dropped the option,
printed http://127.0.0.1:8765 and started the service there."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.deploy.test_install_script import _checkout, _stamp

# Stands for the installed console script: says the port and host it was given, and exits.
FAKE_TOOLSCOUT = (
    '#!/bin/sh\necho "serve with TOOLSCOUT_PORT=${TOOLSCOUT_PORT:-} TOOLSCOUT_HOST=${TOOLSCOUT_HOST:-} args=$*"\n'
)


def _installed_checkout(tmp_path: Path) -> Path:
    root = _checkout(tmp_path)
    fake = root / ".venv" / "bin" / "toolscout"
    fake.unlink()
    fake.write_text(FAKE_TOOLSCOUT)
    fake.chmod(0o755)
    (root / ".venv" / "bin" / "activate").write_text(f'export PATH="{fake.parent}:$PATH"\n')
    _stamp(root)
    return root


def _serve(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root)}
    return subprocess.run(
        ["bash", str(root / "scripts" / "serve.sh"), *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_the_port_option_is_where_it_serves_and_what_it_prints(tmp_path: Path) -> None:
    root = _installed_checkout(tmp_path)
    done = _serve(root, "--port", "8791")
    assert done.returncode == 0, done.stderr
    assert "Toolscout is starting on http://127.0.0.1:8791 (console: http://127.0.0.1:8791/console)" in done.stdout
    assert "TOOLSCOUT_FRONTEND__API_URL=http://127.0.0.1:8791 .venv/bin/toolscout search" in done.stdout
    assert done.stdout.endswith("serve with TOOLSCOUT_PORT=8791 TOOLSCOUT_HOST= args=serve\n")
    done = _serve(root, "--host=0.0.0.0", "--port=8792")
    assert "curl -s http://127.0.0.1:8792/search" in done.stdout
    assert done.stdout.endswith("serve with TOOLSCOUT_PORT=8792 TOOLSCOUT_HOST=0.0.0.0 args=serve\n")
    done = _serve(root)  # no option: the default address, and the CLI needs no URL
    assert "Toolscout is starting on http://127.0.0.1:8765 " in done.stdout and "FRONTEND__API_URL" not in done.stdout


def test_an_unknown_option_stops_it_before_the_install(tmp_path: Path) -> None:
    root = _installed_checkout(tmp_path)
    done = _serve(root, "--prot", "8791")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "scripts/serve.sh: no option --prot (it takes --port P and --host H, as `toolscout serve` does)\n"
    )
