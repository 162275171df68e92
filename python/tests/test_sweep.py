# Sweeps: the CLI's grid through the C++ sweep, serially and with executors.
import concurrent.futures
import math

import pandas
import pytest

import sigprop

GRID = {"scheme": ["xavier", "dslm"], "arch": ["pre-ln", "post-ln"], "layers": [12, 24], "d": [256, 512],
        "dropout": [0, 0.1]}


def test_sweep_rows():
    df = sigprop.sweep(GRID)
    assert isinstance(df, pandas.DataFrame) and len(df) == 32
    assert {"arch", "scheme", "layers", "d", "heads", "final_var", "grad_ratio", "within_bounds"} <= set(df.columns)
    assert df["d"].tolist()[:2] == [256, 256]
    xavier = df[df["scheme"] == "xavier"]
    assert xavier["beta2_k"].isna().all()


def test_sweep_equals_the_cli(cli_rows):
    df = sigprop.sweep({"scheme": ["dslm", "admin"], "layers": [6, 12], "d": [128], "head_dim": 32},
                       bounds=(0.25, 4))
    rows = cli_rows("sweep", "--scheme", "dslm,admin", "--layers", "6,12", "--d", "128", "--head-dim", "32",
                    "--bounds", "0.25,4")
    assert len(rows) == len(df)
    for i, row in enumerate(rows):
        assert df["arch"][i] == row["arch"] and df["scheme"][i] == row["scheme"]
        for name in ("final_var", "var_max", "grad_ratio", "output_change"):
            assert df[name][i] == float(row[name]), (i, name)
        assert bool(df["within_bounds"][i]) == (row["within_bounds"] == "1")


def test_thread_and_process_pools_give_identical_rows():
    serial = sigprop.sweep(GRID)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threads = sigprop.sweep(GRID, executor=pool)
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        processes = sigprop.sweep(GRID, executor=pool)
    pandas.testing.assert_frame_equal(serial, threads)
    pandas.testing.assert_frame_equal(serial, processes)


def test_dask_local_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            rows = sigprop.sweep(GRID, executor=client, chunks=4)
    pandas.testing.assert_frame_equal(sigprop.sweep(GRID), rows)


def test_sweep_hf_config(hf_configs):
    df = sigprop.sweep({"hf_config": str(hf_configs / "gpt2.json"), "layers": [6, 12], "seq": 128,
                        "scheme": ["xavier"]})
    assert len(df) == 2 and df["arch"].tolist() == ["gpt2", "gpt2"] and df["d"].tolist() == [768, 768]


def test_sweep_errors():
    with pytest.raises(ValueError, match="--dropout = 1 is outside the valid range"):
        sigprop.sweep({"dropout": [0, 1]})
    with pytest.raises(ValueError, match="unknown flag --bogus"):
        sigprop.sweep({"bogus": [1]})
    with pytest.raises(ValueError, match="--layers"):
        sigprop.sweep({"layers": [-3]})
    with pytest.raises(TypeError):
        sigprop.sweep([1, 2])
    with pytest.raises(TypeError):
        sigprop.sweep({"layers": [True]})
    with pytest.raises(ValueError):
        sigprop.sweep({"layers": []})
    assert math.isfinite(sigprop.sweep({"layers": [4]})["final_var"][0])
