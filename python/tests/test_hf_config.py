# Hugging Face configs: the one C++ reader, from Python and from the CLI.
import json

import pytest

import sigprop


def test_bert(hf_configs):
    c = sigprop.from_hf_config(hf_configs / "bert-base-uncased.json")
    assert (c.arch, c.layers, c.d, c.heads, c.ffn_width, c.activation) == ("post-ln", 12, 768, 12, 3072, "gelu")
    assert (c.seq_len, c.vocab, c.dropout, c.causal) == (512, 30522, 0.1, False)
    assert c.segment_table and c.position_table and c.embedding_layernorm
    assert c.hf["norm_eps"] == 1e-12 and c.hf["type_vocab_size"] == 2 and c.hf["attention_dropout"] == 0.1


def test_gpt2(hf_configs):
    c = sigprop.from_hf_config(hf_configs / "gpt2.json")
    assert c.architecture_name == "gpt2" and c.ffn_width == 3072 and c.activation == "gelu_tanh"
    assert (c.seq_len, c.vocab, c.dropout) == (1024, 50257, 0.1)
    assert c.position_table and not c.segment_table
    assert c.hf["activation"] == "gelu_new" and c.hf["tie_word_embeddings"]


@pytest.mark.parametrize("name, d, layers, heads, kv, ffn, seq, rope", [
    ("llama-2-7b.json", 4096, 32, 32, 32, 11008, 4096, 10000),
    ("mistral-7b-v0.1.json", 4096, 32, 32, 8, 14336, 32768, 10000),
    ("qwen2-0.5b.json", 896, 24, 14, 2, 4864, 131072, 1e6),
])
def test_llama_family(hf_configs, name, d, layers, heads, kv, ffn, seq, rope):
    c = sigprop.from_hf_config(hf_configs / name)
    assert c.architecture_name == "llama" and c.activation == "silu" and c.dropout == 0
    assert (c.d, c.layers, c.heads, c.kv_heads, c.ffn_width, c.seq_len, c.rotary_base) == \
        (d, layers, heads, kv, ffn, seq, rope)
    assert not c.position_table
    assert c.hf["qkv_bias"] == (name == "qwen2-0.5b.json")


def test_dict_and_seq_len(hf_configs):
    d = json.loads((hf_configs / "llama-2-7b.json").read_text())
    c = sigprop.from_hf_config(d, seq_len=128)
    assert c.seq_len == 128
    t = sigprop.trace(c, sigprop.initialize(c, "dslm"))
    assert len(t.var) == 33


def test_errors(hf_configs):
    with pytest.raises(ValueError, match=r"model_type = 'opt' is outside the valid range \{bert, roberta, gpt2"):
        sigprop.from_hf_config({"model_type": "opt"})
    d = json.loads((hf_configs / "llama-2-7b.json").read_text())
    del d["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size/n_embd is missing"):
        sigprop.from_hf_config(d)
    d = json.loads((hf_configs / "gpt2.json").read_text())
    d["n_head"] = 7
    with pytest.raises(ValueError, match="heads = 7 is outside the valid range: a divisor of d = 768"):
        sigprop.from_hf_config(d)
    d["n_head"] = 12
    d["resid_pdrop"] = 1
    with pytest.raises(ValueError, match=r"resid_pdrop = 1 is outside the valid range \[0, 1\)"):
        sigprop.from_hf_config(d)
    with pytest.raises(ValueError, match="cannot read"):
        sigprop.from_hf_config(hf_configs / "missing.json")
    with pytest.raises(ValueError, match="seq_len = 1"):
        sigprop.from_hf_config(hf_configs / "gpt2.json", seq_len=1)
    with pytest.raises(TypeError):
        sigprop.from_hf_config(42)


def test_cli_reads_the_same(hf_configs, cli_rows):
    path = str(hf_configs / "bert-base-uncased.json")
    c = sigprop.from_hf_config(path)
    t = sigprop.trace(c, sigprop.initialize(c, "bert"))
    rows = cli_rows("table", "--hf-config", path, "--scheme", "bert", "--format", "csv")
    assert [float(r["var"]) for r in rows] == list(t.var)
    assert [float(r["grad_var"]) for r in rows] == list(t.grad_var)


def test_cli_unknown_type(tmp_path, cli):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "opt"}')
    status, out, err = cli("table", "--hf-config", str(bad))
    assert status == 2 and out == "" and "model_type = 'opt'" in err


@pytest.mark.parametrize("name, scheme", [("bert-base-uncased.json", "bert"), ("gpt2.json", "gpt2"),
                                          ("llama-2-7b.json", "llama"), ("qwen2-0.5b.json", "llama")])
def test_default_scheme_is_the_models_own(hf_configs, name, scheme):
    c = sigprop.from_hf_config(hf_configs / name, seq_len=64)
    assert sigprop.default_scheme(c) == c.hf["scheme"] == scheme
    assert c.initializer_range == c.hf["initializer_range"]
    own, named = sigprop.trace(c), sigprop.trace(c, scheme)
    assert list(own.var) == list(named.var) and list(own.grad_var) == list(named.grad_var)
    # Not xavier's trace: the default really is another initialization.
    xavier = sigprop.trace(c, "xavier")
    assert list(own.grad_var) != list(xavier.grad_var) and list(own.corr_len) != list(xavier.corr_len)
    assert sigprop.default_scheme(sigprop.ModelConfig()) == "xavier"


def test_initializer_range_and_attention_dropout(hf_configs):
    d = json.loads((hf_configs / "gpt2.json").read_text())
    d.update(initializer_range=0.05, attn_pdrop=0.0)
    c = sigprop.from_hf_config(d, seq_len=64)
    assert (c.initializer_range, c.attention_dropout, c.dropout) == (0.05, 0.0, 0.1)
    w = sigprop.initialize(c)
    assert w.layers[0].q == pytest.approx(0.05 ** 2, rel=1e-15)
    assert w.layers[0].o == pytest.approx(0.05 ** 2 / (2 * c.layers), rel=1e-15)
    # The attention-probability dropout enters the trace: not the trace of attn_pdrop = resid_pdrop.
    same = dict(d, attn_pdrop=0.1)
    assert list(sigprop.trace(c).var) != list(sigprop.trace(sigprop.from_hf_config(same, seq_len=64)).var)
    d["initializer_range"] = 0
    with pytest.raises(ValueError, match=r"initializer_range = 0 is outside the valid range \(0, inf\)"):
        sigprop.from_hf_config(d)


def test_cli_default_scheme(hf_configs, cli_rows):
    path = str(hf_configs / "gpt2.json")
    own = cli_rows("table", "--hf-config", path, "--seq", "64", "--format", "csv")
    named = cli_rows("table", "--hf-config", path, "--seq", "64", "--scheme", "gpt2", "--format", "csv")
    assert own == named
    sweep = cli_rows("sweep", "--hf-config", path, "--seq", "64", "--layers", "4")
    assert [r["scheme"] for r in sweep] == ["gpt2"]
