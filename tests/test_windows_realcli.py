"""The window txdb assumes for a model is the one each real CLI release
runs it in: ``claude -p --model M`` against the loopback API reports it in
its result (``modelUsage[M].contextWindow``), and ``windows.model_window``
must name the same figure for each installed release."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realcli import Sandbox, claude_binary  # noqa: E402
from realcli.fake_api import text  # noqa: E402

from txdb.model import windows  # noqa: E402

pytestmark = pytest.mark.realcli

# One model of each kind: on the 1M list of every release past 2.1.250,
# added to it by 2.1.328, and never on it.
MODELS = ("claude-opus-5-5", "claude-opus-4-7", "claude-fable-5-2", "claude-sonnet-4-5-20250929",
          "claude-opus-4-6")


@pytest.mark.parametrize("release", sorted(windows.LONG_MODELS, key=windows.release_key))
def test_each_release_runs_each_model_in_the_window_txdb_assumes(tmp_path, release):
    binary = claude_binary(release)
    seen = {}
    with Sandbox(binary, tmp_path / "box") as sb:
        for model in MODELS:
            sb.script(text("hi"))
            r = sb.run("hello", extra_args=["--model", model]).check()
            usage = (r.output or {}).get("modelUsage") or {}
            assert model in usage, (model, list(usage))
            seen[model] = usage[model]["contextWindow"]
    assert seen == {m: windows.model_window(m, release) for m in MODELS}
    # the table is not one figure for all: 2.1.250 runs opus-5-5 in 200k, the later releases in 1M
    assert seen["claude-opus-5-5"] == (200_000 if release == "2.1.250" else 1_000_000)


SRC = Path(__file__).parent / "data" / "generated" / "-home-user-src-demo-14" / "5a73f7d9-de47-4921-a60f-d1c8c68135c5.jsonl"
# auto-compact at 20% of the effective window (the window less the 20k output
# reserve): 36,000 on 200k, 196,000 on 1M; the session sends about 60k
PCT = {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "20"}


@pytest.mark.parametrize("model", ["claude-opus-5-5", "claude-opus-4-6"])
@pytest.mark.parametrize("release", sorted(windows.LONG_MODELS, key=windows.release_key))
def test_each_release_auto_compacts_by_the_window_txdb_assumes(tmp_path, release, model):
    """The window is the one auto-compact reads: resumed with the threshold
    at 20% of it, the ~60k session is compacted where the release runs the
    model in 200k and resumed whole where it runs it in 1M."""
    from realcli.oracle import resume

    r = resume(SRC, "ping", binary=claude_binary(release), workdir=tmp_path, env=PCT,
               extra_args=["--model", model])
    assert r.run.returncode == 0, r.summary()
    assert r.compacted == (windows.model_window(model, release) == windows.WINDOW), r.summary()
