"""scripts/test.sh runs the suite, then the slow suites: a run narrowed with `-k NAME` selects tests in one step
only, and the other step's pytest status 5 ("no test selected") made the whole run fail after its tests passed.

The script runs as written, on a copy of the checkout's scripts whose install steps, services and pytest are
stand-ins: `python` exits with the status each step is given."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"fuzz or browser or cluster"*) echo "slow $*" >> "$STEPS"; exit "$SECOND" ;;
  *) echo "suite $*" >> "$STEPS"; exit "$FIRST" ;;
esac
"""


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    stubs = {
        tmp_path / "scripts" / "install.sh": "#!/usr/bin/env bash\n",
        tmp_path / "scripts" / "install-test-extras.sh": "#!/usr/bin/env bash\n",
        bin_dir / "pg_isready": "#!/usr/bin/env bash\n",
        bin_dir / "redis-cli": "#!/usr/bin/env bash\n",
        bin_dir / "python": FAKE_PYTHON,
    }
    for path, text in stubs.items():
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return tmp_path


@pytest.mark.parametrize(
    ("first", "second", "status"),
    [(0, 5, 0), (5, 0, 0), (0, 0, 0), (5, 5, 5), (1, 0, 1), (0, 1, 1), (5, 2, 2)],
)
def test_a_step_that_selects_no_test_fails_the_run_only_when_the_other_selects_none_either(
    tmp_path: Path, first: int, second: int, status: int
) -> None:
    checkout = _checkout(tmp_path)
    steps = tmp_path / "steps.txt"
    env = {**os.environ, "FIRST": str(first), "SECOND": str(second), "STEPS": str(steps)}
    done = subprocess.run(
        ["bash", "scripts/test.sh", "-k", "a_name"], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert done.returncode == status, done.stderr
    ran = steps.read_text().splitlines()
    assert ran[0] == "suite -m pytest -k a_name"
    assert ran[1:] == ([] if first not in (0, 5) else ["slow -m pytest -m fuzz or browser or cluster -k a_name"])
    if status == 5:
        assert done.stderr.endswith("scripts/test.sh: no test matched the arguments: -k a_name\n")
