# Bad input: ValueError (TypeError for a wrong type) with the C++ message,
# never a crash or a NaN result.
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sigprop


@pytest.mark.parametrize("kwargs, message", [
    ({"layers": -1}, "layers = -1 is outside the valid range"),
    ({"layers": 0}, "layers = 0 is outside the valid range"),
    ({"d": 2.5}, "d = 2.5 is outside the valid range"),
    ({"dropout": 1}, r"dropout = 1 is outside the valid range \[0, 1\)"),
    ({"dropout": math.nan}, "dropout = nan is outside the valid range"),
    ({"dropout": -0.1}, "dropout = -0.1 is outside the valid range"),
    ({"heads": 7}, "heads = 7 is outside the valid range: a divisor of d = 768"),
    ({"kv_heads": 5}, "kv_heads = 5 is outside the valid range: a divisor of heads = 12"),
    ({"activation": "tanh"}, r"activation = 'tanh' is outside the valid range \{relu, gelu, silu"),
    ({"arch": "mamba"}, "arch = 'mamba' is outside the valid range"),
    ({"rotary_base": 0.5}, "rotary"),
    ({"seq_len": 1}, "seq_len = 1 is outside the valid range"),
])
def test_bad_values_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sigprop.ModelConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [{"layers": "12"}, {"dropout": "0.1"}, {"causal": 1}, {"activation": 3},
                                    {"layers": True}, {"bogus": 1}, {"d": None}])
def test_wrong_types_raise_type_error(kwargs):
    with pytest.raises(TypeError):
        sigprop.ModelConfig(**kwargs)


def test_trace_errors():
    c = sigprop.ModelConfig(layers=4, d=64, heads=4)
    with pytest.raises(ValueError, match="scheme = 'nope'"):
        sigprop.initialize(c, "nope")
    with pytest.raises(TypeError):
        sigprop.trace(c, 3)
    with pytest.raises(ValueError, match="grad_var = -1"):
        sigprop.trace(c, "xavier", grad={"var": -1})
    c.dropout = 1  # attributes are checked where they are used
    with pytest.raises(ValueError, match="dropout = 1"):
        sigprop.trace(c)
    with pytest.raises(ValueError, match="q_var = -1"):
        sigprop.initialize(sigprop.ModelConfig(), "xavier", q_var=-1)


values = st.one_of(st.integers(-10, 3000), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.sampled_from(["relu", "gelu", "silu", "pre-ln", "post-ln", "llama", "gpt2", "x"]),
                   st.none())
keys = st.sampled_from(["arch", "layers", "d", "heads", "kv_heads", "ffn_mult", "ffn_width", "activation",
                        "seq_len", "dropout", "rotary_base", "causal", "final_layernorm", "vocab", "norm"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=5), st.sampled_from(["xavier", "dslm", "admin", "rezero"]))
def test_random_keywords_never_crash_or_give_nan(kwargs, scheme):
    kwargs.setdefault("layers", 3)
    if isinstance(kwargs["layers"], int) and not isinstance(kwargs["layers"], bool) and kwargs["layers"] > 8:
        kwargs["layers"] = 8
    if isinstance(kwargs.get("seq_len"), int) and not isinstance(kwargs["seq_len"], bool) and kwargs["seq_len"] > 512:
        kwargs["seq_len"] = 512
    try:
        c = sigprop.ModelConfig(**kwargs)
        t = sigprop.trace(c, sigprop.initialize(c, scheme))
    except (ValueError, TypeError, OverflowError) as e:
        assert str(e)
        return
    for name in ("var", "corr_len", "grad_var", "grad_corr_len"):
        assert np.all(np.isfinite(getattr(t, name))), (kwargs, name)
