# Components: forward/backward through the C++ components of `sigprop component`.
import json
import math

import pytest

import sigprop


def test_component_classes():
    names = set(sigprop.components())
    assert {"linear", "dropout", "relu", "gelu", "layernorm", "softmax", "attention", "embedding"} <= names
    assert {"d_in", "d_out", "weight_var", "bias_var"} == set(sigprop.Linear.parameters)


def test_relu_forward_backward_attributes():
    m = sigprop.Moments(var=2, corr_len=0.5)
    y = sigprop.Relu().forward(m)
    assert y.var > 0 and 0 < y.corr_len < 1
    assert set(y.to_dict()) >= {"mean", "var", "corr_len", "corr_dim"}
    g = sigprop.Relu().backward(m, sigprop.GradMoments(var=1))
    assert g.var == pytest.approx(0.5)
    assert set(g.to_dict()) >= {"grad_var", "grad_corr_len"}


@pytest.mark.parametrize("name, params, flags", [
    ("relu", {}, []),
    ("linear", {"d_in": 100, "d_out": 300, "weight_var": 0.02}, ["--d-in", "100", "--d-out", "300", "--weight-var", "0.02"]),
    ("dropout", {"p": 0.25}, ["--p", "0.25"]),
    ("attention", {"d_in": 256, "d_k": 32, "seq": 128}, ["--d-in", "256", "--d-k", "32", "--seq", "128"]),
    ("softmax", {"n": 64, "form": "full"}, ["--n", "64", "--form", "full"]),
    ("layernorm", {"d": 64}, ["--d", "64"]),
])
def test_components_equal_the_cli(cli, name, params, flags):
    cls = sigprop.components()[name]
    m = sigprop.Moments(mean=0.2, var=1.5, corr_len=0.3, corr_dim=0.05)
    g = sigprop.GradMoments(var=2, corr_len=0.1)
    r = cls(**params).evaluate(m, g)
    status, out, err = cli("component", name, *flags, "--mean", "0.2", "--var", "1.5", "--corr-len", "0.3",
                           "--corr-dim", "0.05", "--grad-var", "2", "--grad-corr-len", "0.1", "--format", "json")
    assert status == 0, err
    expected = json.loads(out)
    for key, value in expected["forward"].items():
        assert getattr(r.forward, key) == value
    assert r.backward.var == expected["backward"]["grad_var"]
    assert r.backward.corr_len == expected["backward"]["grad_corr_len"]


def test_component_errors():
    with pytest.raises(ValueError, match=r"p = 1 is outside the valid range \[0, 1\)"):
        sigprop.Dropout(p=1).forward(sigprop.Moments())
    with pytest.raises(ValueError, match="var = -1 is outside the valid range"):
        sigprop.Relu().forward(sigprop.Moments(var=-1))
    with pytest.raises(ValueError, match="nan"):
        sigprop.Relu().forward(sigprop.Moments(corr_len=math.nan))
    with pytest.raises(TypeError):
        sigprop.Linear(bogus=1)
    with pytest.raises(TypeError):
        sigprop.Moments(var="big")
    with pytest.raises(TypeError):
        sigprop.Dropout(p=True)
