"""mypy over txdb/ ([tool.mypy] in pyproject.toml) against a committed
baseline that only shrinks: a new error fails, and so does a baseline line
whose error is gone (delete it). Lines are ``path: message  [code]``,
without line numbers, so an edit above an old error does not move it.

Regenerate after fixing errors: ``.venv/bin/python tests/test_types.py --update``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: (?P<msg>.*)$")


def normalise(output: str) -> Counter:
    """Each error line as ``path: message``, its line numbers dropped (in the message too)."""
    found: Counter = Counter()
    for line in output.splitlines():
        m = ERROR.match(line)
        if m:
            msg = re.sub(r"line \d+", "line N", m["msg"])
            found[f"{m['path']}: {msg}"] += 1
    return found


def mypy_errors() -> Counter:
    # --no-incremental: a local cache can hide an error a clean clone (CI) reports.
    p = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--no-error-summary", "--no-pretty",
                        "--show-error-codes"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1) or p.returncode == 1 and "error:" not in p.stdout:
        raise AssertionError(f"mypy did not run: {p.returncode} {p.stderr or p.stdout}")
    return normalise(p.stdout)


def baseline() -> Counter:
    return Counter(ln for ln in BASELINE.read_text().splitlines() if ln.strip() and not ln.startswith("#"))


def test_normalise_drops_line_numbers_and_notes():
    out = ("txdb/a.py:3: error: Bad thing defined on line 12  [misc]\n"
           "txdb/a.py:9: note: a hint\n"
           "txdb/a.py:40: error: Bad thing defined on line 99  [misc]\n")
    assert normalise(out) == Counter({"txdb/a.py: Bad thing defined on line N  [misc]": 2})


def test_no_type_error_outside_the_baseline():
    pytest.importorskip("mypy")
    got, want = mypy_errors(), baseline()
    new = sorted((got - want).elements())
    gone = sorted((want - got).elements())
    assert not new, "mypy errors not in tests/mypy-baseline.txt (fix them):\n" + "\n".join(new)
    assert not gone, ("errors fixed: delete these lines from tests/mypy-baseline.txt "
                      "(`python tests/test_types.py --update`):\n" + "\n".join(gone))


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    errors = mypy_errors()
    BASELINE.write_text("# mypy errors left to fix (tests/test_types.py); this list only shrinks.\n"
                        + "".join(f"{e}\n" for e in sorted(errors.elements())))
    print(f"{sum(errors.values())} errors in {BASELINE}")
