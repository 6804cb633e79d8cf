"""The theory-checking scripts (paper 003) pass in --quick mode and write their outputs."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
#: script -> base name of the table and figure it writes
CHECKS = {"check_omega": "omega", "check_heterogeneity": "heterogeneity",
          "check_variance_reduction": "variance_reduction", "check_partial_participation": "partial_participation",
          "check_compression_regimes": "compression_regimes", "check_monotone_em": "monotone_em"}
#: generous per-script wall-clock limit; together they take well under a minute on 2 idle cores
TIMEOUT_S = 150


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CHECKS))
def test_script_claim_holds_in_quick_mode(script, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(SCRIPTS / f"{script}.py"), "--quick", "--out", str(tmp_path),
                           "--seed", "0"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "CLAIM HOLDS" in proc.stdout
    name = CHECKS[script]
    for ext in ("png", "csv", "md"):
        assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / f"{name}.csv")) >= 3


def test_exit_code_is_nonzero_when_the_claim_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import _common

    def failing(quick, seed, out):
        return pd.DataFrame({"x": [1.0]}), False, "made up"

    assert _common.run_main(failing, "doc", "fake", ["--out", str(tmp_path)]) == 1
    assert "CLAIM FAILS: made up" in capsys.readouterr().out


def test_markdown_table_needs_no_optional_dependency(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import _common
    text = _common.markdown_table(pd.DataFrame({"a": [1, 2], "b": [0.5, float("nan")]}))
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.5 |", "| 2 | nan |"]
