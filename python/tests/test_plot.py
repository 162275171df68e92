# sigprop.plot: panels, lines, axis scales, legends, saving, errors.
import sys

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import sigprop  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def models():
    """Pre-LN Xavier (variance 1 -> ~50: log axis) and DSLM (variance 1)."""
    c = sigprop.ModelConfig(layers=24, d=256, heads=4)
    return {"pre-ln xavier": sigprop.trace(c, "xavier"), "pre-ln dslm": sigprop.trace(c, "dslm")}


def labels(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_panels_lines_scales_and_legend(models):
    fig = sigprop.plot(models, ("var", "grad_var", "corr_len", "mid_var"))
    assert len(fig.axes) == 4
    assert all(len(ax.lines) == 2 for ax in fig.axes)
    assert [ax.get_title() for ax in fig.axes] == ["var", "grad_var", "corr_len", "mid_var"]
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log", "linear", "log"]
    assert fig.axes[2].get_ylim()[0] < 0.01 and fig.axes[2].get_ylim()[1] > 0.99
    assert labels(fig.axes[0]) == ["pre-ln xavier", "pre-ln dslm"]
    # the numbers drawn are the trace's (mid_ values: NaN at row 0)
    line = fig.axes[3].lines[0]
    assert list(line.get_xdata()) == list(range(25))
    assert list(line.get_ydata()[1:]) == list(models["pre-ln xavier"].mid_var[1:])


def test_within_a_decade_is_linear(models):
    fig = sigprop.plot(models["pre-ln dslm"], "var")
    assert len(fig.axes) == 1 and fig.axes[0].get_yscale() == "linear"
    assert fig.axes[0].get_legend() is None  # one unlabelled trace


def test_inputs_and_labels(models):
    one, two = models.values()
    fig = sigprop.plot([one, two], ("corr_len",))
    assert labels(fig.axes[0]) == ["model 1", "model 2"]
    fig = sigprop.plot([one, two], ("corr_len",), labels=["a", "b"])
    assert labels(fig.axes[0]) == ["a", "b"]
    configs = [sigprop.ModelConfig(layers=6, d=d, heads=4) for d in (256, 512, 1024)]
    fig = sigprop.plot(sigprop.trace_batch(configs, "dslm"), ("var", "grad_corr_len"))
    assert [len(ax.lines) for ax in fig.axes] == [3, 3]
    assert labels(fig.axes[0]) == ["config 0", "config 1", "config 2"]
    decoder = sigprop.ModelConfig(arch="llama", layers=4, d=256, heads=4, seq_len=64)
    fig = sigprop.plot({"llama": sigprop.trace_positions(decoder, "dslm", [1, 64])}, ("var", "corr_len"))
    assert labels(fig.axes[0]) == ["llama, position 1", "llama, position 64"]


def test_given_axes_and_saving(models, tmp_path):
    fig, axes = plt.subplots(1, 2)
    assert sigprop.plot(models, ("var", "grad_var"), ax=axes) is fig
    assert [len(ax.lines) for ax in axes] == [2, 2]
    path = tmp_path / "trace.png"
    fig = sigprop.plot(models, path=path)
    assert len(fig.axes) == 3 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors(models):
    with pytest.raises(ValueError, match=r"unknown quantity 'variance' \(valid: mean, var, corr_len, .*mid_var"):
        sigprop.plot(models, ("var", "variance"))
    for empty in ([], {}, sigprop.BatchTrace([])):
        with pytest.raises(ValueError, match="no traces"):
            sigprop.plot(empty)
    with pytest.raises(ValueError, match="no quantities"):
        sigprop.plot(models, ())
    with pytest.raises(ValueError, match="3 labels for 2 lines"):
        sigprop.plot(models, labels=["a", "b", "c"])
    figure, ax = plt.subplots()
    with pytest.raises(ValueError, match="1 axes for 3 quantities"):
        sigprop.plot(models, ax=ax)
    with pytest.raises(ValueError, match="not both"):
        sigprop.plot(models, "var", ax=ax, figure=figure)
    with pytest.raises(TypeError, match="not str"):
        sigprop.plot("var")


def test_missing_matplotlib(models, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="python3-matplotlib"):
        sigprop.plot(models)
