# Shared fixtures of the Python package's tests: the Hugging Face fixture
# configs (tests/hf_configs) and the command-line tool, when built.
import csv
import io
import os
import pathlib
import subprocess

import pytest

HF_CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "hf_configs"


@pytest.fixture
def hf_configs():
    return HF_CONFIGS


def run_cli(*args):
    """stdout of `sigprop ARGS` (skips without the tool)."""
    cli = os.environ.get("SIGPROP_CLI")
    if not cli:
        pytest.skip("SIGPROP_CLI not set (the tool is built with the examples)")
    result = subprocess.run([cli, *args], capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def cli_csv(*args):
    status, out, err = run_cli(*args)
    assert status == 0, err
    return list(csv.DictReader(io.StringIO(out)))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def cli_rows():
    return cli_csv
