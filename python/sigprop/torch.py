"""sigprop.torch: check a PyTorch transformer at initialization against
sigprop's prediction (docs/torch.md).

describe(model)  reads an nn.Module into a sigprop ModelConfig and the
                 ModelWeights of its actual per-layer weight variances;
measure(model)   measures, with hooks and autograd, the residual stream
                 after every block and after every attention sublayer:
                 variance, length correlation, gradient variance and
                 correlation, with standard errors;
audit(model)     compares the two (and the weights with a scheme) and
                 returns a Report of findings, a per-layer table and a plot.

Every prediction comes from the C++ library (sigprop.trace,
sigprop.initialize, sigprop.embedding_input); this module reads weights,
runs the model and arranges the numbers.
"""

import copy
import dataclasses
import hashlib
import inspect
import math
import re
from typing import Any, List, Optional

import numpy as np
import torch
from torch import nn

import sigprop as _sp

__all__ = ["Description", "Finding", "Measurement", "Report", "WeightEntry", "audit", "describe", "measure", "shuffle"]

_FN = "sigprop.torch"
_QUANTITIES = ("var", "corr_len", "grad_var", "grad_corr_len")


def _error(function, message):
    return ValueError(f"{_FN}.{function}: {message}")


# ---- reading weights ----------------------------------------------------------

@dataclasses.dataclass
class WeightEntry:
    """One weight (or part of one: GPT-2's fused c_attn, PyTorch's
    in_proj_weight) read from the model: its sigprop field and empirical
    moments. `layer` is 0-based (None for the embedding tables); `field` a
    LayerWeights field (q, k, v, o, ffn1, ffn2, ffn_gate and their _bias) or
    the table (token, position, segment)."""
    module: str
    parameter: str
    layer: Optional[int]
    field: str
    count: int
    mean_square: float
    fourth_moment: float
    fingerprint: str = dataclasses.field(default="", repr=False)
    index: tuple = dataclasses.field(default=None, repr=False)  # (attribute, dim, start, stop) of the parameter

    def tensor(self, modules):
        """This entry's view into the parameter of `modules` (named_modules())."""
        attribute, dim, start, stop = self.index
        return getattr(modules[self.module], attribute).narrow(dim, start, stop - start)

    @property
    def name(self):
        return f"{self.module}.{self.parameter}" if self.module else self.parameter

    @property
    def std_error(self):
        """Standard error of mean_square as an estimate of the entries'
        variance: sqrt((E w^4 - (E w^2)^2)/n) from the entries' own fourth
        moment (2 sigma^4/n for Gaussian entries, 0.8 sigma^4/n for uniform)."""
        return math.sqrt(max(self.fourth_moment - self.mean_square ** 2, 0.0) / self.count)


def _moments_of(tensor):
    w = tensor.detach().to("cpu", torch.float64).reshape(-1)
    if w.numel() == 0:
        return 0, 0.0, 0.0, ""
    w2 = w * w
    fingerprint = hashlib.sha1(w.contiguous().numpy().tobytes()).hexdigest()
    return w.numel(), float(w2.mean()), float((w2 * w2).mean()), fingerprint


@dataclasses.dataclass
class Finding:
    """One thing the audit flags. kind: 'scheme' (a weight's variance is not
    what the scheme prescribes), 'measurement' (the model departs from the
    prediction), 'domain' (the prediction is outside sigprop's validated
    domain), 'overflow' (the predicted growth overflows a float format),
    'unsupported' (the model has something sigprop cannot express), 'tied'
    (a layer's weight identical to an earlier layer's).
    module: the qualified name from named_modules()."""
    module: str
    kind: str
    expected: Any
    actual: Any
    message: str

    def __str__(self):
        return f"[{self.kind}] {self.message}"


def _probe_activation(function, where):
    """The sigprop activation an activation module or function computes,
    recognized by its values."""
    x = torch.linspace(-4, 4, 33, dtype=torch.float64)
    try:
        y = function(x)
    except Exception as e:  # noqa: BLE001 - any failure: the module is not understood
        raise _error("describe", f"{where}: the activation {function!r} could not be evaluated ({e})") from e
    tanh_gelu = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    known = [("relu", torch.relu(x)), ("gelu", nn.functional.gelu(x)), ("gelu_tanh", tanh_gelu),
             ("silu", nn.functional.silu(x))]
    for name, reference in known:
        if torch.allclose(y, reference, atol=1e-6, rtol=1e-6):
            return name
    raise _error("describe", f"{where}: the activation {function!r} is none of ReLU, GeLU (erf or tanh), SiLU")


def _dropout_p(module):
    return float(module.p) if isinstance(module, nn.Dropout) else 0.0


class _Reader:
    """Collects the weights of one model, the modules it understood, and
    what sigprop cannot express."""

    def __init__(self, model, family, patterns):
        self.model = model
        self.family = family
        self.modules = dict(model.named_modules())
        self.entries = []
        self.norms = []  # (module name, module, has bias)
        self.unsupported = []
        self.read_parameters = set()
        self.ffn_width = None  # the first layer's, which every layer must have
        self._check_names(patterns)

    def _check_names(self, patterns):
        compiled = [re.compile(p + r"\Z") for p in patterns]
        for name, module in self.model.named_modules():
            if name and not any(c.match(name) for c in compiled):
                raise _error("describe", f"submodule {name!r} ({type(module).__name__}) is not part of a "
                             f"{self.family} base model as sigprop reads it (docs/torch.md, 'Supported models')")

    def module(self, name):
        if name not in self.modules:
            raise _error("describe", f"a {self.family} base model needs a submodule {name!r}, which this "
                         f"{type(self.model).__name__} does not have")
        return self.modules[name]

    def parameter(self, module_name, parameter):
        module = self.module(module_name)
        p = getattr(module, parameter, None)
        full = f"{module_name}.{parameter}" if module_name else parameter
        if p is not None:
            self.read_parameters.add(full)
        return p

    def add(self, module_name, parameter, layer, field, tensor, index):
        n, m2, m4, fingerprint = _moments_of(tensor)
        self.entries.append(WeightEntry(module_name, parameter, layer, field, n, m2, m4, fingerprint, index))
        return m2

    def linear(self, module_name, layer, field, d_in=None, d_out=None, part=None, parts=1):
        """A linear map: nn.Linear (weight d_out x d_in) or Conv1D (weight
        d_in x d_out, Hugging Face's GPT-2); `part` of `parts` equal slices
        of its output (fused Q/K/V). Returns (weight var, bias var, d_in, d_out)."""
        module = self.module(module_name)
        w = self.parameter(module_name, "weight")
        if w is None or w.dim() != 2:
            raise _error("describe", f"{module_name} ({type(module).__name__}) has no 2-D weight")
        conv1d = not isinstance(module, nn.Linear) and hasattr(module, "nf")
        if conv1d:
            w = w.t()
        out_features, in_features = w.shape
        step = out_features // parts
        k = part or 0
        rows = slice(k * step, (k + 1) * step)
        suffix = f"[{field}]" if parts > 1 else ""
        if d_in is not None and in_features != d_in:
            raise _error("describe", f"{module_name}.weight: input width {in_features}, expected {d_in}")
        if d_out is not None and step != d_out:
            raise _error("describe", f"{module_name}.weight: output width {step}, expected {d_out}")
        wv = self.add(module_name, "weight" + suffix, layer, field, w[rows],
                      ("weight", 1 if conv1d else 0, rows.start, rows.stop))
        b = self.parameter(module_name, "bias")
        bv = self.add(module_name, "bias" + suffix, layer, field + "_bias", b[rows],
                      ("bias", 0, rows.start, rows.stop)) if b is not None else 0.0
        return wv, bv, in_features, step

    def into(self, w, module_name, layer, field, **shape):
        """linear() of `module_name` as `field` (and its bias) of the layer's
        weights `w`; returns its output width."""
        w[field], w[field + "_bias"], _, d_out = self.linear(module_name, layer, field, **shape)
        return d_out

    def block_maps(self, w, layer, d, o, ffn1, ffn2, gate=None):
        """The output projection and the FFN maps (W1, the gated V, W2) of
        `layer` into `w`; the FFN width must be the first layer's."""
        self.into(w, o, layer, "o", d_in=d, d_out=d)
        hidden = self.into(w, ffn1, layer, "ffn1", d_in=d)
        if gate is not None:
            self.into(w, gate, layer, "ffn_gate", d_in=d, d_out=hidden)
        self.into(w, ffn2, layer, "ffn2", d_in=hidden, d_out=d)
        if self.ffn_width is not None and hidden != self.ffn_width:
            raise _error("describe", f"{ffn1}: width {hidden}, layer 0's is {self.ffn_width}: sigprop needs one FFN width")
        self.ffn_width = hidden

    def fused(self, module_name, weight, bias, layer, d):
        """PyTorch's MultiheadAttention in_proj (3d x d, Q/K/V stacked)."""
        w = self.parameter(module_name, weight)
        if w is None:
            raise _error("describe", f"{module_name}: no {weight} (separate Q/K/V weights are not supported)")
        if tuple(w.shape) != (3 * d, d):
            raise _error("describe", f"{module_name}.{weight}: shape {tuple(w.shape)}, expected ({3 * d}, {d})")
        b = self.parameter(module_name, bias)
        out = {}
        for i, f in enumerate("qkv"):
            out[f] = self.add(module_name, f"{weight}[{f}]", layer, f, w[i * d:(i + 1) * d],
                              (weight, 0, i * d, (i + 1) * d))
            out[f + "_bias"] = self.add(module_name, f"{bias}[{f}]", layer, f + "_bias", b[i * d:(i + 1) * d],
                                        (bias, 0, i * d, (i + 1) * d)) if b is not None else 0.0
        return out

    def table(self, module_name, field):
        w = self.parameter(module_name, "weight")
        if w is None:
            raise _error("describe", f"{module_name} has no weight")
        return self.add(module_name, "weight", None, field, w, ("weight", 0, 0, w.shape[0])), w.shape[0]

    def norm(self, module_name, rms=False):
        module = self.module(module_name)
        if module is None:
            return
        self.parameter(module_name, "weight")
        if not rms:
            self.parameter(module_name, "bias")
        self.norms.append((module_name, module, not rms))

    def ignore(self, prefix):
        """Parameters outside the path to the hidden states (BERT's pooler)."""
        for name, _ in self.model.named_parameters():
            if name.startswith(prefix + "."):
                self.read_parameters.add(name)

    def tied(self):
        """Weights equal, entry for entry, to an earlier layer's (e.g.
        nn.TransformerEncoder deep-copies its layer: every layer starts
        identical); sigprop predicts independently drawn layers."""
        first = {}
        for e in self.entries:
            if e.layer is None or not e.fingerprint or e.mean_square == 0:
                continue
            key = (e.field, e.fingerprint)
            if key in first and first[key].layer != e.layer:
                self.unsupported.append(Finding(
                    e.module, "tied", first[key].name, e.name,
                    f"{e.name} is identical to {first[key].name}: the layers are not drawn independently "
                    f"(nn.TransformerEncoder deep-copies its layer; re-initialize each layer), which sigprop's "
                    f"prediction assumes"))
            first.setdefault(key, e)

    def finish(self):
        self.tied()
        for name, _ in self.model.named_parameters():
            if name not in self.read_parameters:
                module = name.rsplit(".", 1)[0] if "." in name else ""
                raise _error("describe", f"parameter {name!r} of submodule {module!r} is not one sigprop reads in a "
                             f"{self.family} base model")

    def unsupported_finding(self, module, message, expected=None, actual=None):
        self.unsupported.append(Finding(module, "unsupported", expected, actual, message))

    def norm_affine(self):
        """ln_gain, ln_bias: one value for every norm (ModelConfig); a norm
        whose gain or bias is not one constant, or differs from the first
        norm's, is reported as unsupported (and the mean square is used)."""
        gains, biases = [], []
        reference = None
        for name, module, has_bias in self.norms:
            w = getattr(module, "weight", None)
            b = getattr(module, "bias", None) if has_bias else None
            g = w.detach().to("cpu", torch.float64) if w is not None else torch.ones(1, dtype=torch.float64)
            c = b.detach().to("cpu", torch.float64) if b is not None else torch.zeros(1, dtype=torch.float64)
            gains.append(float((g * g).mean()))
            biases.append(float(c.mean()))
            if float(g.max() - g.min()) > 1e-9 * max(float(g.abs().max()), 1e-300) or \
                    float(c.max() - c.min()) > 1e-9 * max(float(c.abs().max()), 1e-12):
                self.unsupported_finding(name, f"{name}: gain or bias not the same for every unit (gain in "
                                         f"[{float(g.min()):.4g}, {float(g.max()):.4g}], bias in [{float(c.min()):.4g}, "
                                         f"{float(c.max()):.4g}]); sigprop models one gain and bias for every unit "
                                         f"of every norm (used: the mean square gain)")
                continue
            value = (float(g[0]), float(c[0]))
            if reference is None:
                reference = (name, value)
            elif not np.allclose(value, reference[1], rtol=1e-9, atol=1e-12):
                self.unsupported_finding(name, f"{name}: gain {value[0]:.4g} and bias {value[1]:.4g} differ from "
                                         f"{reference[0]}'s ({reference[1][0]:.4g}, {reference[1][1]:.4g}); sigprop "
                                         f"models one gain and bias for all norms")
        if not gains:
            return 1.0, 0.0
        return math.sqrt(float(np.mean(gains))), float(np.mean(biases))


# ---- the description ------------------------------------------------------------

@dataclasses.dataclass
class Description:
    """A model as sigprop sees it. config: the ModelConfig; weights: the
    ModelWeights of the actual empirical variances (per layer; the input
    moments from the actual tables, or the given input moments); entries:
    every weight read (WeightEntry); unsupported: Findings of what sigprop
    cannot express; rows: the measured tensors, (layer, sublayer, module,
    hook), in forward order."""
    family: str
    config: Any
    weights: Any
    entries: List[WeightEntry]
    unsupported: List[Finding]
    rows: List[tuple]
    embedding: dict
    input_moments: Any = None
    batch_first: bool = True
    causal: bool = False
    training: bool = True
    _call: Any = None
    _sample: Any = None

    @property
    def layers(self):
        return self.config.layers

    def entry(self, name):
        """The WeightEntry named `name` (e.g. 'h.0.mlp.c_proj.weight')."""
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def module_of(self, layer, sublayer):
        for n, s, module, _ in self.rows:
            if n == layer and s == sublayer:
                return module
        return ""


def _layer_count(reader, prefix):
    n = 0
    while f"{prefix}.{n}" in reader.modules:
        n += 1
    if n == 0:
        raise _error("describe", f"no layers: a {reader.family} base model needs submodules {prefix}.0, {prefix}.1, ...")
    return n


def _heads_of(module, name, attrs, where):
    for a in attrs:
        v = getattr(module, a, None)
        if isinstance(v, int) and v > 0:
            return v
    raise _error("describe", f"{where}: no head count (attribute {' or '.join(attrs)}) on {name}")


def _zipf_ids(vocab, shape, generator):
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    probs = 1.0 / ranks
    flat = torch.multinomial(probs, int(np.prod(shape)), replacement=True, generator=generator)
    return flat.view(shape)


def _token_sampler(vocab, segments=False):
    """Token ids drawn i.i.d. from Zipf's law over the ranks (sigprop's token
    model, components/embedding.hpp); with segments, token_type_ids split
    into two non-empty segments at a uniform point."""
    def sample(batch, seq_len, generator):
        ids = _zipf_ids(vocab, (batch, seq_len), generator)
        kwargs = {}
        if segments:
            split = torch.randint(1, seq_len, (batch, 1), generator=generator)
            kwargs["token_type_ids"] = (torch.arange(seq_len).view(1, -1) >= split).long()
        return (ids,), kwargs
    return sample


def _gaussian_sampler(d, moments, batch_first):
    """Gaussian inputs with the given mean, variance and length correlation
    (montecarlo/sampler.hpp: x_ij = mu + sqrt(r s^2) a_j + sqrt((1 - r) s^2) e_ij)."""
    def sample(batch, seq_len, generator):
        r, s2 = moments.corr_len, moments.var
        shared = torch.randn(batch, 1, d, generator=generator, dtype=torch.float64)
        own = torch.randn(batch, seq_len, d, generator=generator, dtype=torch.float64)
        x = moments.mean + math.sqrt(r * s2) * shared + math.sqrt((1 - r) * s2) * own
        return ((x if batch_first else x.transpose(0, 1)),), {}
    return sample


_GPT2_PATTERNS = [r"wte", r"wpe", r"drop", r"h", r"h\.\d+", r"h\.\d+\.(ln_1|ln_2|attn|mlp)",
                  r"h\.\d+\.attn\.(c_attn|c_proj|attn_dropout|resid_dropout)", r"h\.\d+\.mlp\.(c_fc|c_proj|act|dropout)",
                  r"ln_f"]
_LLAMA_PATTERNS = [r"embed_tokens", r"layers", r"layers\.\d+",
                   r"layers\.\d+\.(self_attn|mlp|input_layernorm|post_attention_layernorm)",
                   r"layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|o_proj|rotary_emb)",
                   r"layers\.\d+\.mlp\.(gate_proj|up_proj|down_proj|act_fn)", r"norm", r"rotary_emb"]
_BERT_LAYER = r"encoder\.layer\.\d+"
_BERT_PATTERNS = [r"embeddings", r"embeddings\.(word_embeddings|position_embeddings|token_type_embeddings|LayerNorm|dropout)",
                  r"encoder", r"encoder\.layer", _BERT_LAYER, _BERT_LAYER + r"\.(attention|intermediate|output)",
                  _BERT_LAYER + r"\.attention\.(self|output)", _BERT_LAYER + r"\.attention\.self\.(query|key|value|dropout)",
                  _BERT_LAYER + r"\.attention\.output\.(dense|LayerNorm|dropout)",
                  _BERT_LAYER + r"\.intermediate\.(dense|intermediate_act_fn)",
                  _BERT_LAYER + r"\.output\.(dense|LayerNorm|dropout)", r"pooler", r"pooler\.(dense|activation)"]
_ENCODER_LAYER = [r"self_attn", r"self_attn\.out_proj", r"linear1", r"linear2", r"dropout", r"dropout1", r"dropout2",
                  r"norm1", r"norm2", r"activation"]


def _family(model):
    if isinstance(model, nn.TransformerEncoder):
        return "transformer-encoder"
    if isinstance(model, nn.TransformerEncoderLayer):
        return "transformer-encoder-layer"
    children = dict(model.named_children())
    if "wte" in children and "h" in children:
        return "gpt2"
    if "embed_tokens" in children and "layers" in children:
        return "llama"
    if "embeddings" in children and "encoder" in children:
        return "bert"
    first = next(iter(children), None)
    raise _error("describe", f"model {type(model).__name__} is none of the supported models (nn.TransformerEncoder, "
                 f"nn.TransformerEncoderLayer, GPT-2, Llama or BERT base models with Hugging Face's module names): "
                 f"its first submodule {first!r} is not understood" if first else
                 f"model {type(model).__name__} has no submodules")


def describe(model, seq_len=None, causal=None, input_moments=None):
    """Reads `model` (an nn.Module) into a Description: its sigprop
    ModelConfig and the ModelWeights of its actual per-layer weight variances.

    model: nn.TransformerEncoder or nn.TransformerEncoderLayer (Gaussian
    inputs of `input_moments`, default mean 0, variance 1, length
    correlation 0.2; `causal` True for a causal mask, default False), or a
    GPT-2, Llama or BERT base model with Hugging Face's module names (token
    ids drawn from Zipf's law). seq_len: the measured sequence length
    (default 32, at most the model's positions). Dropout as in the model's
    mode: its rates in training mode, none in eval mode. Raises ValueError
    naming the first submodule or parameter it does not understand."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{_FN}.describe: model must be a torch.nn.Module, not {type(model).__name__}")
    family = _family(model)
    if seq_len is not None and (not isinstance(seq_len, int) or seq_len < 2):
        raise _error("describe", f"seq_len = {seq_len!r} is outside the valid range: a whole number >= 2")
    if family in ("gpt2", "llama", "bert") and causal is not None and bool(causal) != (family != "bert"):
        raise _error("describe", f"causal = {causal!r}: a {family} model is {'not ' if family == 'bert' else ''}causal")
    reader_fn = {"gpt2": _read_gpt2, "llama": _read_llama, "bert": _read_bert,
                 "transformer-encoder": _read_encoder, "transformer-encoder-layer": _read_encoder}[family]
    return reader_fn(model, seq_len, causal, input_moments)


def _seq_len(seq_len, limit, where):
    if seq_len is None:
        return min(32, limit) if limit else 32
    if limit and seq_len > limit:
        raise _error("describe", f"seq_len = {seq_len} is outside the valid range: at most {limit} ({where})")
    return seq_len


def _finish(reader, model, config_kwargs, layer_fields, tables, rows, call, sample, input_moments=None,
            batch_first=True, causal=False, scale=1.0):
    """The ModelConfig and ModelWeights from what was read."""
    gain, bias = reader.norm_affine()
    reader.finish()
    config = _sp.ModelConfig(**config_kwargs, ln_gain=gain, ln_bias=bias)
    weights = _sp.ModelWeights()
    layers = []
    for fields in layer_fields:
        w = _sp.LayerWeights()
        for name, value in fields.items():
            setattr(w, name, value)
        layers.append(w)
    weights.layers = layers
    if tables:
        output, model_input = _sp.embedding_input(config, tables.get("token", 0.0), tables.get("position", 0.0),
                                                  tables.get("segment", 0.0), scale)
        weights.embedding_var = tables.get("token", 0.0)
        weights.embedding_scale = scale
        weights.embedding_layernorm = config.embedding_layernorm
        weights.embedding_output = output
        weights.input = model_input
    else:
        weights.input = input_moments
    return Description(reader.family, config, weights, reader.entries, reader.unsupported, rows,
                       {k: v for k, v in tables.items()} if tables else {}, input_moments, batch_first, causal,
                       model.training, call, sample)


def _read_gpt2(model, seq_len, causal, input_moments):
    r = _Reader(model, "GPT-2", _GPT2_PATTERNS)
    N = _layer_count(r, "h")
    token_var, vocab = r.table("wte", "token")
    position_var, positions = r.table("wpe", "position")
    d = r.module("wte").weight.shape[1]
    training = model.training
    p_embd = _dropout_p(r.modules.get("drop")) if training else 0.0
    layers, rows = [], [(0, "input", "wte", ("input", "h.0"))]
    resid = attn_p = None
    activation = None
    for n in range(N):
        h = f"h.{n}"
        attn = r.module(f"{h}.attn")
        heads = _heads_of(attn, f"{h}.attn", ("num_heads", "n_head"), "GPT-2")
        if not getattr(attn, "scale_attn_weights", True):
            r.unsupported_finding(f"{h}.attn", f"{h}.attn: attention scores not scaled by 1/sqrt(d_k) "
                                  "(scale_attn_weights False); sigprop assumes the scaling")
        w = {}
        for part, f in enumerate("qkv"):
            r.into(w, f"{h}.attn.c_attn", n, f, d_in=d, d_out=d, part=part, parts=3)
        r.block_maps(w, n, d, f"{h}.attn.c_proj", f"{h}.mlp.c_fc", f"{h}.mlp.c_proj")
        act = _probe_activation(r.module(f"{h}.mlp.act"), f"{h}.mlp.act")
        if activation is not None and act != activation:
            raise _error("describe", f"{h}.mlp.act: {act}, layer 0's is {activation}")
        activation = act
        r.norm(f"{h}.ln_1")
        r.norm(f"{h}.ln_2")
        ps = {"attention": _dropout_p(r.modules.get(f"{h}.attn.attn_dropout")),
              "residual": _dropout_p(r.modules.get(f"{h}.attn.resid_dropout")),
              "mlp": _dropout_p(r.modules.get(f"{h}.mlp.dropout"))} if training else \
            {"attention": 0.0, "residual": 0.0, "mlp": 0.0}
        if ps["mlp"] != ps["residual"]:
            r.unsupported_finding(f"{h}.mlp.dropout", f"{h}.mlp.dropout: p = {ps['mlp']} differs from the attention "
                                  f"output's {ps['residual']}; sigprop has one dropout on the block outputs")
        if resid is not None and (ps["residual"], ps["attention"]) != (resid, attn_p):
            r.unsupported_finding(h, f"{h}: dropout rates differ from layer 0's; sigprop has one rate per placement")
        resid, attn_p = ps["residual"], ps["attention"]
        layers.append(w)
        rows += [(n + 1, "attention", f"{h}.attn", ("input", f"{h}.ln_2")),
                 (n + 1, "block", f"{h}.mlp", ("output", h))]
    r.norm("ln_f")
    if p_embd != resid:
        r.unsupported_finding("drop", f"drop: embedding dropout p = {p_embd} differs from the residual dropout "
                              f"{resid}; sigprop has one rate for both")
    L = _seq_len(seq_len, positions, f"wpe has {positions} rows")
    kwargs = dict(arch="gpt2", layers=N, d=d, heads=heads, ffn_width=r.ffn_width, activation=activation, seq_len=L,
                  dropout=resid, attention_dropout=attn_p, vocab=vocab, token_table=True, position_table=True,
                  segment_table=False, initializer_range=_initializer_range(model))
    return _finish(r, model, kwargs, layers, {"token": token_var, "position": position_var}, rows,
                   _call_ids, _token_sampler(vocab), causal=True)


def _initializer_range(model):
    r = getattr(getattr(model, "config", None), "initializer_range", None)
    return float(r) if isinstance(r, (int, float)) and r > 0 else 0.02


def _call_ids(model, args, kwargs):
    return model(*args, **kwargs)


def _read_llama(model, seq_len, causal, input_moments):
    r = _Reader(model, "Llama", _LLAMA_PATTERNS)
    N = _layer_count(r, "layers")
    token_var, vocab = r.table("embed_tokens", "token")
    d = r.module("embed_tokens").weight.shape[1]
    layers, rows = [], [(0, "input", "embed_tokens", ("input", "layers.0"))]
    activation = heads = kv_heads = base = None
    attn_p = 0.0
    for n in range(N):
        h = f"layers.{n}"
        attn = r.module(f"{h}.self_attn")
        heads = _heads_of(attn, f"{h}.self_attn", ("num_heads",), "Llama")
        kv_heads = getattr(attn, "num_key_value_heads", heads)
        dk = d // heads
        w = {}
        r.into(w, f"{h}.self_attn.q_proj", n, "q", d_in=d, d_out=d)
        r.into(w, f"{h}.self_attn.k_proj", n, "k", d_in=d, d_out=kv_heads * dk)
        r.into(w, f"{h}.self_attn.v_proj", n, "v", d_in=d, d_out=kv_heads * dk)
        # sigprop's gated FFN act(x W1) * (x V): W1 the gate (activated), V the up projection.
        r.block_maps(w, n, d, f"{h}.self_attn.o_proj", f"{h}.mlp.gate_proj", f"{h}.mlp.down_proj",
                     gate=f"{h}.mlp.up_proj")
        activation = _probe_activation(r.module(f"{h}.mlp.act_fn"), f"{h}.mlp.act_fn")
        rotary = r.modules.get(f"{h}.self_attn.rotary_emb") or r.modules.get("rotary_emb")
        base = getattr(rotary, "base", None) or getattr(attn, "rope_theta", None)
        if base is None:
            raise _error("describe", f"{h}.self_attn: no rotary base (rotary_emb.base or rope_theta)")
        attn_p = float(getattr(attn, "attention_dropout", 0.0) or 0.0) if model.training else 0.0
        r.norm(f"{h}.input_layernorm", rms=True)
        r.norm(f"{h}.post_attention_layernorm", rms=True)
        layers.append(w)
        rows += [(n + 1, "attention", f"{h}.self_attn", ("input", f"{h}.post_attention_layernorm")),
                 (n + 1, "block", f"{h}.mlp", ("output", h))]
    r.norm("norm", rms=True)
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    L = _seq_len(seq_len, positions, f"max_position_embeddings = {positions}")
    kwargs = dict(arch="llama", layers=N, d=d, heads=heads, kv_heads=kv_heads, ffn_width=r.ffn_width, activation=activation,
                  seq_len=L, dropout=0.0, attention_dropout=attn_p, rotary_base=float(base), vocab=vocab,
                  token_table=True, position_table=False, segment_table=False,
                  initializer_range=_initializer_range(model))
    return _finish(r, model, kwargs, layers, {"token": token_var}, rows, _call_ids, _token_sampler(vocab),
                   causal=True)


def _read_bert(model, seq_len, causal, input_moments):
    r = _Reader(model, "BERT", _BERT_PATTERNS)
    N = _layer_count(r, "encoder.layer")
    token_var, vocab = r.table("embeddings.word_embeddings", "token")
    position_var, positions = r.table("embeddings.position_embeddings", "position")
    tables = {"token": token_var, "position": position_var}
    segments = "embeddings.token_type_embeddings" in r.modules
    if segments:
        tables["segment"], types = r.table("embeddings.token_type_embeddings", "segment")
        if types < 2:
            r.unsupported_finding("embeddings.token_type_embeddings", "embeddings.token_type_embeddings: one row; "
                                  "sigprop's segment table has two segments")
    d = r.module("embeddings.word_embeddings").weight.shape[1]
    r.norm("embeddings.LayerNorm")
    training = model.training
    hidden_p = _dropout_p(r.modules.get("embeddings.dropout")) if training else 0.0
    if hidden_p > 0:
        r.unsupported_finding("embeddings.dropout", "embeddings.dropout: BERT drops out after the embedding "
                              "LayerNorm, sigprop before it; measure in eval mode or with hidden dropout 0")
    layers, rows = [], [(0, "input", "embeddings", ("input", "encoder.layer.0"))]
    activation = heads = None
    attn_p = 0.0
    for n in range(N):
        h = f"encoder.layer.{n}"
        heads = _heads_of(r.module(f"{h}.attention.self"), f"{h}.attention.self", ("num_attention_heads",), "BERT")
        w = {}
        for f, name in zip("qkv", ("query", "key", "value")):
            r.into(w, f"{h}.attention.self.{name}", n, f, d_in=d, d_out=d)
        r.block_maps(w, n, d, f"{h}.attention.output.dense", f"{h}.intermediate.dense", f"{h}.output.dense")
        activation = _probe_activation(r.module(f"{h}.intermediate.intermediate_act_fn"),
                                       f"{h}.intermediate.intermediate_act_fn")
        r.norm(f"{h}.attention.output.LayerNorm")
        r.norm(f"{h}.output.LayerNorm")
        if training:
            attn_p = _dropout_p(r.modules.get(f"{h}.attention.self.dropout"))
            for name in (f"{h}.attention.output.dropout", f"{h}.output.dropout"):
                if _dropout_p(r.modules.get(name)) != hidden_p:
                    r.unsupported_finding(name, f"{name}: p = {_dropout_p(r.modules.get(name))} differs from "
                                          f"embeddings.dropout's {hidden_p}; sigprop has one hidden dropout rate")
        layers.append(w)
        rows += [(n + 1, "attention", f"{h}.attention", ("output", f"{h}.attention")),
                 (n + 1, "block", f"{h}.output", ("output", h))]
    r.ignore("pooler")
    L = _seq_len(seq_len, positions, f"position_embeddings has {positions} rows")
    kwargs = dict(arch="post-ln", layers=N, d=d, heads=heads, ffn_width=r.ffn_width, activation=activation, seq_len=L,
                  dropout=hidden_p, attention_dropout=attn_p, vocab=vocab, token_table=True, position_table=True,
                  segment_table=segments, embedding_layernorm=True, initializer_range=_initializer_range(model))
    return _finish(r, model, kwargs, layers, tables, rows, _call_ids, _token_sampler(vocab, segments), causal=False)


def _read_encoder(model, seq_len, causal, input_moments):
    single = isinstance(model, nn.TransformerEncoderLayer)
    prefix = "" if single else "layers."
    patterns = _ENCODER_LAYER if single else [r"layers", r"norm"] + [r"layers\.\d+"] + \
        [r"layers\.\d+\." + p for p in _ENCODER_LAYER]
    r = _Reader(model, "nn.TransformerEncoder", patterns)
    N = 1 if single else _layer_count(r, "layers")
    names = [""] if single else [f"layers.{n}" for n in range(N)]
    first = model if single else model.layers[0]
    d = first.self_attn.embed_dim
    batch_first = bool(getattr(first.self_attn, "batch_first", False))
    norm_first = bool(getattr(first, "norm_first", False))
    training = model.training
    layers, rows = [], [(0, "input", "", ("input", names[0] if names[0] else ""))]
    activation = heads = None
    rates = None
    for n, h in enumerate(names):
        layer = r.module(h)
        p = f"{h}." if h else ""
        if bool(getattr(layer, "norm_first", False)) != norm_first:
            raise _error("describe", f"{h}: norm_first differs from layer 0's")
        attn = r.module(f"{p}self_attn")
        if not getattr(attn, "_qkv_same_embed_dim", True):
            raise _error("describe", f"{p}self_attn: separate q/k/v projection weights (kdim/vdim) are not supported")
        heads = attn.num_heads
        w = r.fused(f"{p}self_attn", "in_proj_weight", "in_proj_bias", n, d)
        r.block_maps(w, n, d, f"{p}self_attn.out_proj", f"{p}linear1", f"{p}linear2")
        activation = _probe_activation(layer.activation, f"{p}activation")
        r.norm(f"{p}norm1")
        r.norm(f"{p}norm2")
        here = (float(attn.dropout), _dropout_p(layer.dropout1), _dropout_p(layer.dropout2),
                _dropout_p(layer.dropout)) if training else (0.0, 0.0, 0.0, 0.0)
        if here[1] != here[2]:
            r.unsupported_finding(f"{p}dropout2", f"{p}dropout1 and dropout2 differ ({here[1]}, {here[2]}); "
                                  "sigprop has one dropout on the block outputs")
        if rates is not None and here != rates:
            r.unsupported_finding(h, f"{h}: dropout rates differ from layer 0's")
        rates = here
        layers.append(w)
        mid = ("input", f"{p}norm2") if norm_first else ("output", f"{p}norm1")
        rows += [(n + 1, "attention", f"{p}self_attn", mid), (n + 1, "block", h, ("output", h))]
    final = not single and getattr(model, "norm", None) is not None
    if final:
        r.norm("norm")
        if not norm_first:
            r.unsupported_finding("norm", "norm: a final norm after Post-LN layers; sigprop's final norm is Pre-LN's "
                                  "(with gain 1 and bias 0 it changes nothing but the gradient's scale)")
    moments = input_moments if input_moments is not None else _sp.Moments(mean=0.0, var=1.0, corr_len=0.2)
    if not isinstance(moments, _sp.Moments):
        raise TypeError(f"{_FN}.describe: input_moments must be a sigprop.Moments, not {type(moments).__name__}")
    if not (0 <= moments.corr_len <= 1 and moments.var > 0):
        raise _error("describe", f"input_moments: corr_len = {moments.corr_len} and var = {moments.var} are outside "
                     "the valid range: a Gaussian input needs corr_len in [0, 1] and var > 0")
    causal = bool(causal)
    L = _seq_len(seq_len, None, "")
    kwargs = dict(arch="pre-ln" if norm_first else "post-ln", layers=N, d=d, heads=heads, ffn_width=r.ffn_width,
                  activation=activation, seq_len=L, dropout=rates[1], attention_dropout=rates[0],
                  ffn_dropout=rates[3], final_layernorm=bool(final and norm_first), causal=causal)

    def call(module, args, kwargs):
        x = args[0]
        mask = None
        if causal:
            length = x.shape[1] if batch_first else x.shape[0]
            mask = torch.triu(torch.full((length, length), float("-inf"), dtype=x.dtype, device=x.device), 1)
        if single:
            return module(x, src_mask=mask)
        return module(x, mask=mask)

    return _finish(r, model, kwargs, layers, None, rows, call, _gaussian_sampler(d, moments, batch_first),
                   input_moments=moments, batch_first=batch_first, causal=causal)


# ---- measuring ------------------------------------------------------------------

def _estimate(values):
    """Mean and its standard error over draws (montecarlo/statistics.hpp)."""
    v = np.asarray(values, dtype=np.float64)
    se = v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.inf
    return float(v.mean()), float(se)


def _ratio(num, den):
    """Ratio of means with the delta-method standard error."""
    num, den = np.asarray(num), np.asarray(den)
    b = den.mean()
    if b == 0:
        return 0.0, math.inf
    q = num.mean() / b
    return float(q), _estimate((num - q * den) / b)[1]


def _raw_moments(x, batch_first):
    """Per sequence (L x d) mean, mean square and mean product of two
    distinct positions (the same hidden unit), averaged over the batch."""
    x = x.detach().to(torch.float64)
    if not batch_first:
        x = x.transpose(0, 1)
    _, L, d = x.shape
    sq = (x * x).sum((1, 2))
    col = x.sum(1)
    raw = torch.stack([x.mean((1, 2)), sq / (L * d), ((col * col).sum(-1) - sq) / (d * L * (L - 1))], dim=1)
    return raw.mean(0).cpu().numpy()


def _summarize(raws):
    """Moments over draws: the variance and length covariance centred with the
    mean pooled over all draws, the correlation a ratio of means."""
    raws = np.asarray(raws)
    pooled = raws[:, 0].mean()
    var = raws[:, 1] - pooled * pooled
    cov = raws[:, 2] - pooled * pooled
    return _estimate(raws[:, 0]), _estimate(var), _ratio(cov, var)


@dataclasses.dataclass
class Measurement:
    """Measured moments per row (layer, sublayer): columns layer, sublayer,
    module, mean, var, corr_len, grad_var, grad_corr_len, each with _se;
    `table` a pandas DataFrame (a dict of lists without pandas)."""
    columns: dict
    draws: int
    batch: int
    seq_len: int

    @property
    def table(self):
        return _sp._frame(self.columns)

    def __getattr__(self, name):
        columns = self.__dict__.get("columns", {})
        if name in columns:
            return np.asarray(columns[name])
        raise AttributeError(name)


def _input_call(description, inputs, draw, batch, seq_len, generator):
    if inputs is None:
        return description._sample(batch, seq_len, generator)
    value = inputs(draw) if callable(inputs) else inputs
    if isinstance(value, dict):
        value = dict(value)
        first = next(iter(value))
        return (value.pop(first),), value
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    return (value,), {}


def _to(value, device, dtype):
    if torch.is_tensor(value):
        if value.is_floating_point():
            value = value.to(device=device, dtype=dtype or value.dtype)
            return value.detach().requires_grad_(True)
        return value.to(device)
    return value


def shuffle(model, description, generator=None):
    """Re-draws `model`'s weights in place by permuting the entries of every
    weight and bias that describe() read (each part of a fused Q/K/V
    separately): a new draw with exactly the same empirical variances, so
    the description's prediction holds for it unchanged."""
    modules = dict(model.named_modules())
    with torch.no_grad():
        for e in description.entries:
            if e.index is None or e.count == 0:
                continue
            view = e.tensor(modules)
            flat = view.reshape(-1).clone()
            perm = torch.randperm(flat.numel(), generator=generator).to(flat.device)
            view.copy_(flat[perm].view_as(view))


def measure(model, inputs=None, draws=8, *, reinitialize=None, batch=8, seq_len=None, causal=None,
            input_moments=None, dtype=torch.float64, device="cpu", seed=0, description=None):
    """Measures `model` over `draws` forward and backward passes: the model
    input, the residual stream after each attention sublayer and after each
    block: variance, length correlation (the mean correlation of two
    positions, per hidden unit), and, for a N(0, 1) gradient at the output,
    the gradient's variance and length correlation, each with its standard
    error over the draws (the statistics of montecarlo/statistics.hpp).

    inputs: None (drawn per draw: Zipf token ids, or Gaussian inputs of
    `input_moments` for nn.TransformerEncoder), a tensor, tuple or dict of
    forward arguments used in every draw, or a callable draw -> those.
    reinitialize: None (the weights as they are), "shuffle" (before every
    draw, each weight's entries permuted: shuffle()), or a callable(model)
    re-drawing the measured model's weights before every draw (it gets the
    measured copy). batch
    sequences per draw. dtype, device: the measured copy's (default float64
    on the CPU; None keeps the model's)."""
    if not isinstance(draws, int) or draws < 2:
        raise _error("measure", f"draws = {draws!r} is outside the valid range: a whole number >= 2 "
                     "(standard errors need two draws)")
    if not isinstance(batch, int) or batch < 1:
        raise _error("measure", f"batch = {batch!r} is outside the valid range: a whole number >= 1")
    desc = description or describe(model, seq_len=seq_len, causal=causal, input_moments=input_moments)
    work = model
    if dtype is not None or device is not None:
        work = copy.deepcopy(model)
        work.to(device=device, dtype=dtype)
    target_device = next(work.parameters()).device
    target_dtype = next(work.parameters()).dtype
    generator = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.manual_seed(seed)
    modules = dict(work.named_modules())
    forward_raw = [[] for _ in desc.rows]
    grad_raw = [[] for _ in desc.rows]
    try:
        for draw in range(draws):
            if reinitialize == "shuffle":
                shuffle(work, desc, generator)
            elif reinitialize is not None:
                reinitialize(work)
            args, kwargs = _input_call(desc, inputs, draw, batch, desc.config.seq_len, generator)
            args = tuple(_to(a, target_device, target_dtype) for a in args)
            kwargs = {k: _to(v, target_device, None) for k, v in kwargs.items()}
            captured = [None] * len(desc.rows)
            handles = []
            for i, (_, _, _, (where, name)) in enumerate(desc.rows):
                module = modules[name]

                def pre(_module, hook_args, i=i):
                    if captured[i] is None:
                        captured[i] = hook_args[0]

                def post(_module, _args, output, i=i):
                    captured[i] = output[0] if isinstance(output, (tuple, list)) else output

                handles.append(module.register_forward_pre_hook(pre) if where == "input"
                               else module.register_forward_hook(post))
            try:
                output = desc._call(work, args, kwargs)
            finally:
                for h in handles:
                    h.remove()
            if isinstance(output, (tuple, list)):
                output = output[0]
            missing = [desc.rows[i][2] or "input" for i, c in enumerate(captured) if c is None]
            if missing:
                raise _error("measure", f"the forward pass did not reach {missing[0]!r}")
            if not all(c.requires_grad for c in captured):
                raise _error("measure", "the measured tensors do not require grad (parameters frozen?)")
            top = torch.randn(output.shape, generator=generator, dtype=torch.float64).to(output.device, output.dtype)
            grads = torch.autograd.grad(output, captured, top, allow_unused=True)
            for i, (x, g) in enumerate(zip(captured, grads)):
                forward_raw[i].append(_raw_moments(x, desc.batch_first))
                grad_raw[i].append(_raw_moments(g if g is not None else torch.zeros_like(x), desc.batch_first))
    finally:
        torch.random.set_rng_state(torch_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
    columns = {k: [] for k in ("layer", "sublayer", "module", "mean", "mean_se", "var", "var_se", "corr_len",
                               "corr_len_se", "grad_var", "grad_var_se", "grad_corr_len", "grad_corr_len_se")}
    for i, (layer, sublayer, module, _) in enumerate(desc.rows):
        mean, var, corr = _summarize(forward_raw[i])
        _, gvar, gcorr = _summarize(grad_raw[i])
        columns["layer"].append(layer)
        columns["sublayer"].append(sublayer)
        columns["module"].append(module)
        for name, (value, se) in (("mean", mean), ("var", var), ("corr_len", corr), ("grad_var", gvar),
                                  ("grad_corr_len", gcorr)):
            columns[name].append(value)
            columns[name + "_se"].append(se)
    return Measurement(columns, draws, batch, desc.config.seq_len)


# ---- the audit -----------------------------------------------------------------

def _prediction_rows(trace, description):
    """The trace's values in the order of description.rows."""
    out = {q: [] for q in _QUANTITIES}
    out["outside_domain"] = []
    for layer, sublayer, _, _ in description.rows:
        prefix = "mid_" if sublayer == "attention" else ""
        for q in _QUANTITIES:
            out[q].append(float(getattr(trace, prefix + q)[layer]))
        out["outside_domain"].append(bool(trace.outside_domain[layer]))
    return out


def _hint(ratio, config):
    """A factor the ratio of two variances is close to (2N, N, d, ...)."""
    N, d, H = config.layers, config.d, config.heads
    factors = {"2N": 2 * N, "N": N, "d": d, "sqrt(d)": math.sqrt(d), "H": H, "d/H": d / H, "sqrt(2N)": math.sqrt(2 * N),
               "10^2": 100.0, "10": 10.0}
    for name, f in factors.items():
        if f > 1.5:
            for value, sign in ((ratio, ""), (1 / ratio if ratio > 0 else math.inf, "1/")):
                if abs(value / f - 1) < 0.08:
                    return f" (ratio {sign}{name} = {sign}{f:.4g})"
    return ""


def _scheme_findings(description, expected, scheme_name, k, rtol):
    findings = []
    for e in description.entries:
        if e.layer is None:
            if not _has_tables(description):
                continue
            target = expected.embedding_var
        else:
            target = getattr(expected.layers[e.layer], e.field)
        diff = e.mean_square - target
        if abs(diff) > k * e.std_error and abs(diff) > rtol * target:
            ratio = e.mean_square / target if target > 0 else math.inf
            findings.append(Finding(e.module, "scheme", target, e.mean_square,
                                    f"{e.name}: variance {e.mean_square:.3g} (std {math.sqrt(e.mean_square):.3g}), "
                                    f"{scheme_name} prescribes {target:.3g} (std {math.sqrt(target):.3g}); "
                                    f"ratio {ratio:.3g}{_hint(ratio, description.config) if target > 0 else ''}, "
                                    f"sampling error {e.std_error:.2g} ({e.count} entries)"))
    skips = {(w.attn_skip, w.attn_branch, w.ffn_skip, w.ffn_branch) for w in expected.layers}
    if skips != {(1.0, 1.0, 1.0, 1.0)}:
        findings.append(Finding("", "unsupported", None, None,
                                f"{scheme_name} prescribes residual scales other than 1, which the model's modules do "
                                "not hold: the weights are compared, the residual scales are not"))
    if expected.embedding_scale != 1 or expected.embedding_layernorm and not description.config.embedding_layernorm:
        findings.append(Finding("", "unsupported", None, None,
                                f"{scheme_name} prescribes an embedding scale or LayerNorm this model does not have"))
    return findings


def _has_tables(description):
    return bool(description.embedding)


def _departures(pred, meas, k, rtol, corr_tol):
    """Per row and quantity: whether the measurement departs from the
    prediction by more than k standard errors and the tolerance (relative for
    variances, absolute for correlations)."""
    flags = {}
    for q in _QUANTITIES:
        p, m, se = np.asarray(pred[q]), np.asarray(meas[q]), np.asarray(meas[q + "_se"])
        tol = corr_tol * np.ones_like(p) if "corr" in q else rtol * np.abs(p)
        flags[q] = (np.abs(m - p) > k * se) & (np.abs(m - p) > tol) | ~np.isfinite(m)
    return flags


def _measurement_findings(description, pred, meas, flags):
    """At most one finding for the forward pass and, when the forward pass
    agrees, one for the backward pass. A departure propagates (forward: to
    every later row; backward: to every row below), so the finding names the
    sublayer that introduced most of it: the largest change of the error
    (log measured/predicted for variances, measured - predicted for
    correlations) from one row to the next, among the rows up to the first
    departing one (forward) or down to it from the output (backward)."""
    rows = description.rows
    findings = []

    def text(i, q):
        layer, sublayer, module, _ = rows[i]
        where = "the model input" if sublayer == "input" else \
            f"layer {layer} after the attention sublayer" if sublayer == "attention" else f"layer {layer}"
        change = f" ({(meas[q][i] / pred[q][i] - 1) * 100:+.1f} %)" if pred[q][i] and "corr" not in q else ""
        return f"{q} at {where}: measured {meas[q][i]:.4g} +- {meas[q + '_se'][i]:.2g}, predicted {pred[q][i]:.4g}{change}"

    def error(q, i):
        m, p = meas[q][i], pred[q][i]
        if "corr" in q:
            return m - p
        return math.log(m / p) if m > 0 and p > 0 else (0.0 if m == p else math.inf)

    forward = [i for i in range(len(rows)) if flags["var"][i] or flags["corr_len"][i]]
    if forward:
        i = forward[0]
        q = "var" if flags["var"][i] else "corr_len"
        jumps = [abs(error(q, r) - (error(q, r - 1) if r > 0 else 0.0)) for r in range(i + 1)]
        culprit = int(np.argmax(jumps))
        module = rows[culprit][2]
        later = len(forward) - 1
        findings.append(Finding(module, "measurement", pred[q][i], meas[q][i],
                                f"{module or 'input'}: {text(i, q)}; the first departing row of the forward pass"
                                + (f" ({later} later rows depart too)" if later else "")
                                + (f", most of it introduced at {text(culprit, q)}" if culprit != i else "")
                                + " - the model does not compute what sigprop reads from its modules and weights"))
        return findings
    backward = [i for i in range(len(rows)) if flags["grad_var"][i] or flags["grad_corr_len"][i]]
    if backward:
        i = backward[-1]
        q = "grad_var" if flags["grad_var"][i] else "grad_corr_len"
        last = len(rows) - 1
        jumps = {r: abs(error(q, r) - (error(q, r + 1) if r < last else 0.0)) for r in range(i, last + 1)}
        r = max(jumps, key=jumps.get)
        module = rows[r + 1][2] if r < last else _final_module(description)
        findings.append(Finding(module, "measurement", pred[q][i], meas[q][i],
                                f"{module or 'output'}: {text(i, q)}; the first departing row of the backward pass, "
                                f"most of it introduced {'by the sublayer above ' + text(r, q) if r < last else 'at the output'}"
                                " - the module does not backpropagate as sigprop predicts"))
    return findings


def _final_module(description):
    return {"gpt2": "ln_f", "llama": "norm", "transformer-encoder": "norm"}.get(description.family, "")


def _warning_findings(description, trace, pred, precision, margin):
    findings = []
    for i, (layer, sublayer, module, _) in enumerate(description.rows):
        if pred["outside_domain"][i] and sublayer == "block":
            scores = float(trace.mid_score_var[layer])
            findings.append(Finding(module, "domain", None, scores,
                                    f"{module}: layer {layer}'s prediction is outside sigprop's validated domain "
                                    f"(attention score variance {scores:.3g}, key weight "
                                    f"{float(trace.mid_key_weight[layer]):.3g}; docs/domains.md)"))
    if precision is not None:
        limit = float(torch.finfo(precision).max)
        for q in ("var", "grad_var"):
            values = np.asarray(pred[q])
            i = int(np.argmax(values))
            if math.sqrt(values[i]) * margin > limit:
                layer, _, module, _ = description.rows[i]
                findings.append(Finding(module, "overflow", limit, math.sqrt(values[i]),
                                        f"{module or 'input'}: predicted {q} {values[i]:.3g} at layer {layer}: "
                                        f"{margin:g} standard deviations exceed {precision}'s largest value "
                                        f"{limit:.4g}"))
    return findings


@dataclasses.dataclass
class Report:
    """The audit of one model: ok (no finding), findings, and the per-layer
    table of predicted (from the model's actual weights) and measured
    moments (columns layer, sublayer, module, and for var, corr_len,
    grad_var, grad_corr_len: predicted_<q>, <q>, <q>_se, <q>_departs)."""
    ok: bool
    findings: List[Finding]
    columns: dict
    description: Description
    trace: Any
    measurement: Measurement
    scheme: Optional[str] = None

    @property
    def table(self):
        return _sp._frame(self.columns)

    def __str__(self):
        d = self.description
        c = d.config
        lines = [f"sigprop.torch audit: {d.family}, {c.layers} layers, d = {c.d}, {c.heads} heads, L = {c.seq_len}, "
                 f"{c.architecture_name}, {c.activation}, dropout {c.dropout:g}"
                 + (f", scheme {self.scheme}" if self.scheme else "")
                 + f"; {self.measurement.draws} draws of {self.measurement.batch} sequences",
                 "ok" if self.ok else f"{len(self.findings)} finding(s):"]
        lines += [f"  {f}" for f in self.findings]
        lines.append("")
        header = f"{'layer':>5} {'where':<9} {'var pred':>9} {'measured':>18} {'corr pred':>9} {'measured':>16} " \
                 f"{'grad pred':>9} {'measured':>18} {'gcorr pred':>10} {'measured':>16}"
        lines.append(header)
        cols = self.columns
        for i in range(len(cols["layer"])):
            cells = [f"{cols['layer'][i]:>5} {cols['sublayer'][i]:<9}"]
            for q, width, fmt in (("var", 18, ".4g"), ("corr_len", 16, ".4f"), ("grad_var", 18, ".4g"),
                                  ("grad_corr_len", 16, ".4f")):
                mark = "*" if cols[q + "_departs"][i] else " "
                measured = f"{cols[q][i]:{fmt}} +- {cols[q + '_se'][i]:.2g}{mark}"
                cells.append(f"{cols['predicted_' + q][i]:>{9 if q != 'grad_corr_len' else 10}{fmt}} {measured:>{width}}")
            lines.append(" ".join(cells))
        return "\n".join(lines)

    def plot(self, path=None, figure=None):
        """Measured (points with standard errors) and predicted (lines) per
        layer: variance, length correlation, gradient variance and
        correlation; rows of a finding's module marked. Returns the
        matplotlib Figure (saved to `path` when given). matplotlib is imported
        here, not with the package."""
        from matplotlib.figure import Figure

        fig = figure or Figure(figsize=(10, 7), constrained_layout=True)
        axes = fig.subplots(2, 2)
        cols = self.columns
        x = np.asarray(cols["layer"], dtype=float) - np.where(np.asarray(cols["sublayer"]) == "attention", 0.5, 0.0)
        flagged = {f.module for f in self.findings}
        marks = [x[i] for i in range(len(x)) if cols["module"][i] and
                 any(f == cols["module"][i] or f.startswith(cols["module"][i] + ".") for f in flagged)]
        titles = {"var": "variance", "corr_len": "length correlation", "grad_var": "gradient variance",
                  "grad_corr_len": "gradient length correlation"}
        for ax, q in zip(axes.flat, _QUANTITIES):
            ax.plot(x, cols["predicted_" + q], "-", color="C0", label="predicted (sigprop)")
            ax.errorbar(x, cols[q], yerr=2 * np.asarray(cols[q + "_se"]), fmt="o", ms=3, color="C1",
                        label="measured (+- 2 se)")
            for m in marks:
                ax.axvline(m, color="C3", alpha=0.4, lw=1)
            if q in ("var", "grad_var") and np.all(np.asarray(cols["predicted_" + q]) > 0):
                ax.set_yscale("log")
            ax.set_title(titles[q])
            ax.set_xlabel("layer (x.5: after the attention sublayer)")
        axes.flat[0].legend(fontsize=8)
        d = self.description
        fig.suptitle(f"{d.family}: {d.config.layers} layers, d = {d.config.d}"
                     + ("" if self.ok else f" - {len(self.findings)} finding(s), red lines"))
        if path is not None:
            fig.savefig(path, dpi=110)
        return fig


def audit(model, scheme=None, inputs=None, draws=8, *, k=4.0, rtol=0.2, corr_tol=0.05, weight_k=4.0,
          weight_rtol=0.05, reinitialize="shuffle", batch=8, seq_len=None, causal=None, input_moments=None,
          dtype=torch.float64, device="cpu", precision=None, overflow_margin=100.0, seed=0):
    """Audits `model` at initialization (docs/torch.md): describe() it,
    measure() it, trace sigprop's prediction from its actual weights, and
    report findings:

    scheme      with scheme (a name of sigprop.schemes(), or a ModelWeights
                from sigprop.initialize(describe(model).config, ...)): every
                weight whose variance departs from the scheme's by more than
                weight_k sampling standard errors and weight_rtol;
    measurement the first row (forward: from the input; backward: from the
                output) where the measurement departs from the prediction by
                more than k standard errors and rtol (variances; corr_tol for
                correlations, absolute);
    domain      layers whose prediction is outside the validated domain;
    overflow    a predicted standard deviation whose overflow_margin multiple
                exceeds the largest value of `precision` (default: the
                model's dtype if float16 or bfloat16, else float16);
    unsupported what the model has that sigprop cannot express.

    inputs: None (drawn: the prediction includes the embedding), or the
    forward arguments as measure() takes them (the prediction then starts
    from the measured input moments). reinitialize: as measure()'s; the
    default "shuffle" measures over draws of the model's own weight entries,
    so the standard errors include the weights' draw, as the prediction
    averages over it (None: the model's weights as they are; one draw's
    departures from the average are then not in the standard errors).
    Returns a Report."""
    desc = describe(model, seq_len=seq_len, causal=causal, input_moments=input_moments)
    findings = list(desc.unsupported)
    scheme_name = None
    if scheme is not None:
        if isinstance(scheme, str):
            scheme_name = scheme
            expected = _sp.initialize(desc.config, scheme)
        elif isinstance(scheme, _sp.ModelWeights):
            scheme_name = "the given weights"
            expected = scheme
        else:
            raise TypeError(f"{_FN}.audit: scheme must be a scheme name or a sigprop.ModelWeights, not "
                            f"{type(scheme).__name__}")
        if len(expected.layers) != desc.config.layers:
            raise _error("audit", f"scheme: {len(expected.layers)} layers, the model has {desc.config.layers}")
        findings += _scheme_findings(desc, expected, scheme_name, weight_k, weight_rtol)
    meas = measure(model, inputs, draws, reinitialize=reinitialize, batch=batch, dtype=dtype, device=device,
                   seed=seed, description=desc)
    weights = desc.weights
    if inputs is not None:
        weights.input = _sp.Moments(mean=float(meas.mean[0]), var=float(meas.var[0]),
                                    corr_len=float(meas.corr_len[0]))
    trace = _sp.trace(desc.config, weights, position_gradients=True)
    pred = _prediction_rows(trace, desc)
    mcols = meas.columns
    flags = _departures(pred, mcols, k, rtol, corr_tol)
    findings += _measurement_findings(desc, pred, mcols, flags)
    if precision is None:
        model_dtype = next(model.parameters()).dtype
        precision = model_dtype if model_dtype in (torch.float16, torch.bfloat16) else torch.float16
    findings += _warning_findings(desc, trace, pred, precision, overflow_margin)
    columns = {"layer": mcols["layer"], "sublayer": mcols["sublayer"], "module": mcols["module"]}
    for q in _QUANTITIES:
        columns["predicted_" + q] = pred[q]
        columns[q] = mcols[q]
        columns[q + "_se"] = mcols[q + "_se"]
        columns[q + "_departs"] = [bool(f) for f in flags[q]]
    return Report(not findings, findings, columns, desc, trace, meas, scheme_name)
