# The Python examples (examples/python) run, so they cannot rot.
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(script, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, EXAMPLES / script, tmp_path], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert any(tmp_path.glob("*.png")), result.stdout
