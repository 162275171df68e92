"""Plain-PyTorch base models of three published families, with Hugging Face's
module names and forward semantics (docs/torch.md): GPT-2 (GPT2Model),
Llama (LlamaModel: RMSNorm, rotary, SwiGLU, grouped-query attention) and
BERT (BertModel). Each forward takes `input_ids` (B, L) and returns the
final hidden states (B, L, d) (BertModel: the tuple (hidden states, pooled
output), as Hugging Face's). Initialization as Hugging Face's
`_init_weights`: every matrix and table N(0, initializer_range^2), biases 0,
norms' gain 1 and bias 0; GPT-2's residual projections (`c_proj`) further
times 1/sqrt(2N).

No language-model head, no caching, no padding masks: what sigprop.torch
reads and measures at initialization.
"""

import dataclasses
import math
from typing import Optional

import torch
from torch import nn

__all__ = [
    "BertConfig", "BertModel", "Conv1D", "GELUActivation", "GPT2Config", "GPT2Model", "LlamaConfig", "LlamaModel",
    "LlamaRMSNorm", "NewGELUActivation",
]


class NewGELUActivation(nn.Module):
    """GPT-2's `gelu_new`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GELUActivation(nn.Module):
    """BERT's `gelu`: x Phi(x) (the erf form)."""

    def forward(self, x):
        return nn.functional.gelu(x)


_ACTIVATIONS = {"gelu_new": NewGELUActivation, "gelu": GELUActivation, "relu": nn.ReLU, "silu": nn.SiLU}


def _activation(name):
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation = {name!r} is outside the valid range {{{', '.join(_ACTIVATIONS)}}}")
    return _ACTIVATIONS[name]()


# ---- GPT-2 ------------------------------------------------------------------

@dataclasses.dataclass
class GPT2Config:
    """Hugging Face's GPT2Config fields (their defaults: GPT-2 small)."""
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: Optional[int] = None
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    conv1d: bool = True  # c_attn etc. as Conv1D (weight d_in x d_out, as Hugging Face's); False: nn.Linear


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: y = x W + b with W of shape (nx, nf)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        shape = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(shape)


def _projection(config, d_out, d_in):
    return Conv1D(d_out, d_in) if config.conv1d else nn.Linear(d_in, d_out)


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        n = config.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.c_attn = _projection(config, 3 * self.embed_dim, self.embed_dim)
        self.c_proj = _projection(config, self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _split_heads(self, x):
        return x.view(x.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        weights = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(value.size(-1))
        length = query.size(-2)
        causal = self.bias[:, :, :length, :length]
        weights = torch.where(causal, weights, torch.tensor(torch.finfo(weights.dtype).min, dtype=weights.dtype,
                                                             device=weights.device))
        weights = self.attn_dropout(nn.functional.softmax(weights, dim=-1))
        out = torch.matmul(weights, value).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.embed_dim,))
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, inner, config):
        super().__init__()
        self.c_fc = _projection(config, inner, config.n_embd)
        self.c_proj = _projection(config, config.n_embd, inner)
        self.act = _activation(config.activation_function)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(inner, config)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states))
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        return (hidden_states,)  # Hugging Face's blocks return a tuple


class GPT2Model(nn.Module):
    """GPT-2 base model: wte + wpe, dropout, N Pre-LN blocks, ln_f."""

    def __init__(self, config=None, **kwargs):
        super().__init__()
        self.config = config = config or GPT2Config(**kwargs)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Hugging Face's GPT2PreTrainedModel._init_weights."""
        r = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, Conv1D, nn.Embedding)):
                module.weight.normal_(0.0, r)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, r / math.sqrt(2 * self.config.n_layer))

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(-1), device=input_ids.device)
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(positions))
        for block in self.h:
            hidden_states = block(hidden_states)[0]
        return self.ln_f(hidden_states)


# ---- Llama ------------------------------------------------------------------

@dataclasses.dataclass
class LlamaConfig:
    """Hugging Face's LlamaConfig fields (their defaults: Llama-2-7B)."""
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: Optional[int] = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_dropout: float = 0.0
    hidden_act: str = "silu"
    initializer_range: float = 0.02


class LlamaRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) times a gain (initially 1)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class LlamaRotaryEmbedding(nn.Module):
    """cos and sin of position i times base^(-2j/d_k) for the pairs (j, j + d_k/2)."""

    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim = dim
        self.base = base
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)),
                             persistent=False)

    def forward(self, x, length):
        t = torch.arange(length, device=x.device, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads or self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.rope_theta = config.rope_theta
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, base=self.rope_theta)

    def forward(self, hidden_states):
        b, length, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(b, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, length, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, length, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(v, length)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(self.num_key_value_groups, dim=1)  # Hugging Face's repeat_kv
        v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        weights = weights.masked_fill(mask, torch.finfo(weights.dtype).min)
        weights = nn.functional.softmax(weights, dim=-1)
        weights = nn.functional.dropout(weights, p=self.attention_dropout, training=self.training)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, length, self.hidden_size)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = _activation(config.hidden_act)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return (hidden_states,)


class LlamaModel(nn.Module):
    """Llama base model: embed_tokens, N pre-RMSNorm decoder layers, norm."""

    def __init__(self, config=None, **kwargs):
        super().__init__()
        self.config = config = config or LlamaConfig(**kwargs)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Hugging Face's LlamaPreTrainedModel._init_weights."""
        r = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, r)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states)[0]
        return self.norm(hidden_states)


# ---- BERT -------------------------------------------------------------------

@dataclasses.dataclass
class BertConfig:
    """Hugging Face's BertConfig fields (their defaults: bert-base-uncased)."""
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    add_pooling_layer: bool = True


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        positions = torch.arange(input_ids.size(-1), device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + \
            self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def _heads(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        q, k, v = self._heads(self.query(hidden_states)), self._heads(self.key(hidden_states)), \
            self._heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return (context.view(context.size()[:-2] + (self.all_head_size,)),)


class _BertAddNorm(nn.Module):
    """LayerNorm(dropout(dense(h)) + residual): BERT's sublayer outputs."""

    def __init__(self, config, width):
        super().__init__()
        self.dense = nn.Linear(width, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertSelfOutput(_BertAddNorm):
    def __init__(self, config):
        super().__init__(config, config.hidden_size)


class BertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states):
        return (self.output(self.self(hidden_states)[0], hidden_states),)


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = _activation(config.hidden_act)

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(_BertAddNorm):
    def __init__(self, config):
        super().__init__(config, config.intermediate_size)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states):
        attention_output = self.attention(hidden_states)[0]
        return (self.output(self.intermediate(attention_output), attention_output),)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states):
        for layer in self.layer:
            hidden_states = layer(hidden_states)[0]
        return hidden_states


class BertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class BertModel(nn.Module):
    """BERT base model: three tables, embedding LayerNorm, N Post-LN layers;
    returns (hidden states, pooled output) (pooled None without a pooler)."""

    def __init__(self, config=None, **kwargs):
        super().__init__()
        self.config = config = config or BertConfig(**kwargs)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if config.add_pooling_layer else None
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Hugging Face's BertPreTrainedModel._init_weights."""
        r = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, r)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()

    def forward(self, input_ids, token_type_ids=None):
        hidden_states = self.encoder(self.embeddings(input_ids, token_type_ids))
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        return hidden_states, pooled
