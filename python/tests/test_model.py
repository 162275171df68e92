# Whole models: ModelConfig, initialize, trace, trace_batch, positions.
import pickle

import numpy as np
import pytest

import sigprop


def test_config_defaults_and_attributes():
    c = sigprop.ModelConfig()
    assert (c.arch, c.layers, c.d, c.heads, c.kv_heads, c.ffn_width, c.activation) == \
        ("pre-ln", 12, 768, 12, 12, 3072, "relu")
    assert (c.causal, c.rotary_base, c.vocab, c.seq_len, c.dropout) == (False, 0.0, 32000.0, 256, 0.1)
    c.layers = 24
    c.activation = "gelu"
    assert c.layers == 24 and c.activation == "gelu"
    c.activation = sigprop.Activation.silu
    assert c.activation == "silu"


def test_config_presets_and_explicit_values():
    c = sigprop.ModelConfig(arch="llama", layers=32, d=4096, heads=32, seq_len=2048)
    assert c.arch == "pre-ln" and c.architecture_name == "llama"
    assert c.causal and c.gated_ffn and c.norm == "rmsnorm" and c.activation == "silu"
    assert c.ffn_width == 10928 and c.dropout == 0  # 8d/3 rounded up to a multiple of 8
    c = sigprop.ModelConfig(arch="llama", d=512, heads=8, ffn_width=1000, dropout=0.05)
    assert c.ffn_width == 1000 and c.dropout == 0.05


def test_config_round_trips():
    c = sigprop.ModelConfig(arch="gpt2", layers=6, d=256, heads=4, rotary_base=10000)
    assert sigprop.ModelConfig(**c.to_dict()) == c
    assert pickle.loads(pickle.dumps(c)) == c
    assert "layers=6" in repr(c)


def test_schemes():
    names = [s["name"] for s in sigprop.schemes()]
    assert len(names) == 19 and {"dslm", "admin", "torch-default", "gpt2", "llama"} <= set(names)


def test_trace_columns():
    c = sigprop.ModelConfig(layers=8, d=256, heads=4)
    w = sigprop.initialize(c, "dslm")
    assert len(w.layers) == 8 and w.layers[0].q > 0
    t = sigprop.trace(c, w)
    for name in ("var", "corr_len", "grad_var", "grad_corr_len", "mid_var", "mid_grad_var", "branch_var",
                 "residual_share", "score_var", "outside_domain", "layer"):
        assert len(getattr(t, name)) == 9, name
    assert isinstance(t.var, np.ndarray)
    assert np.isnan(t.mid_var[0]) and np.all(np.isfinite(t.mid_var[1:]))
    assert list(t.layer) == list(range(9))
    df = t.to_pandas()
    assert list(df["var"]) == list(t.var)
    assert t.output["var"] > 0
    with pytest.raises(AttributeError):
        t.no_such_column


def test_trace_equals_the_cli_table(cli_rows):
    c = sigprop.ModelConfig(arch="post-ln", layers=6, d=256, heads=4, activation="gelu", dropout=0.05)
    t = sigprop.trace(c, sigprop.initialize(c, "admin"))
    rows = cli_rows("table", "--arch", "post-ln", "--scheme", "admin", "--layers", "6", "--d", "256", "--heads", "4",
                    "--activation", "gelu", "--dropout", "0.05", "--format", "csv")
    for n, row in enumerate(rows):
        for name in ("var", "corr_len", "grad_var", "grad_corr_len", "branch_var", "residual_share"):
            assert getattr(t, name)[n] == float(row[name]), (n, name)


def test_trace_batch_equals_trace():
    configs = [sigprop.ModelConfig(layers=6, d=d, heads=d // 64, dropout=p) for d in (256, 512) for p in (0, 0.1)]
    batch = sigprop.trace_batch(configs, "dslm")
    assert len(batch) == 4 and batch.var.shape == (4, 7)
    for i, c in enumerate(configs):
        single = sigprop.trace(c, sigprop.initialize(c, "dslm"))
        np.testing.assert_allclose(batch[i].var, single.var, rtol=1e-12)
        np.testing.assert_allclose(batch[i].grad_var, single.grad_var, rtol=1e-12)
    assert len(batch.to_pandas()) == 4 * 7


def test_positions():
    c = sigprop.ModelConfig(arch="llama", layers=4, d=256, heads=4, seq_len=64, rotary_base=10000)
    w = sigprop.initialize(c, "dslm")
    p = sigprop.trace_positions(c, w, [1, 16, 64])
    assert list(p.position) == [1, 16, 64] and p.var.shape == (5, 3)
    g = sigprop.trace_position_gradients(c, w, [1, 64])
    assert g.grad_var.shape == (5, 2) and np.all(g.grad_var > 0)
    assert len(p.to_pandas()) == 15
    full = sigprop.trace_positions(c, w)
    t = sigprop.trace(c, w)
    # (llama's token table alone, with rotary embeddings: 1.4e-4)
    np.testing.assert_allclose(full.var.mean(axis=1), t.var, rtol=2e-4)
