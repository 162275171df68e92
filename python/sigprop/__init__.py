"""sigprop: closed-form signal propagation through transformers at initialization.

Bindings of the C++ library (docs/python.md): every number comes from the
C++ code (the compiled model layer and the command-line tool's components
and sweep); this package only converts arguments and arranges results as
numpy arrays and pandas DataFrames, and draws them (plot, with matplotlib). Bad input raises ValueError (TypeError
for a wrong type) with the C++ message.
"""

import itertools
import json
import os

import numpy as np

from . import _sigprop as _core
from ._sigprop import (
    Activation,
    AttentionGradient,
    LogitScale,
    GradMoments,
    LayerWeights,
    ModelConfig,
    ModelWeights,
    Moments,
    Norm,
)
from .plot import plot

__version__ = "0.1.0"

__all__ = [
    "Activation", "AttentionGradient", "LogitScale", "BatchTrace", "Component", "GradMoments", "LayerWeights",
    "ModelConfig", "ModelWeights", "Moments", "Norm", "PositionTrace", "Trace", "components",
    "default_scheme", "embedding_input", "from_hf_config", "initialize", "plot", "schemes", "sweep", "trace",
    "trace_batch",
    "trace_position_gradients", "trace_positions",
]


def _frame(columns):
    """A pandas DataFrame of `columns` when pandas is installed, else the dict."""
    try:
        import pandas
    except ImportError:  # pragma: no cover - Debian's python3-pandas is a test dependency
        return dict(columns)
    return pandas.DataFrame(columns)


class _Columns:
    """Named numpy columns, read as attributes (trace.var)."""

    @property
    def columns(self):
        return list(self._columns)

    def __getattr__(self, name):
        columns = self.__dict__.get("_columns", {})
        if name in columns:
            return columns[name]
        raise AttributeError(f"{type(self).__name__} has no column {name!r} (columns: {', '.join(columns)})")


class Trace(_Columns):
    """Per-layer moments of one model: columns (numpy arrays of length
    layers + 1, row n the output of layer n, row 0 the model input) named as
    the CLI's csv: var, corr_len, mean, corr_dim, ..., grad_var,
    grad_corr_len, ..., score_var, ..., branch_var, residual_share, the same
    with mid_ (after each layer's attention sublayer; NaN at row 0, where
    the CLI prints null), outside_domain; `output` the moments after the
    final norm, `output_change` and `sensitivity` Admin's measures."""

    def __init__(self, result):
        self._columns = result["columns"]
        self.output = result["output"]
        self.output_change = result["output_change"]
        self.sensitivity = result["sensitivity"]

    def __len__(self):
        return len(self._columns["layer"])

    def to_dict(self):
        return dict(self._columns)

    def to_pandas(self):
        return _frame(self._columns)

    def __repr__(self):
        return f"Trace({len(self) - 1} layers, columns {', '.join(self._columns)})"


class BatchTrace:
    """The traces of many configurations (trace_batch): batch[i] is the
    Trace of configuration i; batch.var etc. are 2-D arrays
    [configuration, layer]."""

    def __init__(self, traces):
        self.traces = traces

    def __len__(self):
        return len(self.traces)

    def __getitem__(self, i):
        return self.traces[i]

    def __iter__(self):
        return iter(self.traces)

    def __getattr__(self, name):
        traces = self.__dict__.get("traces", [])
        if traces and name in traces[0].columns:
            return np.stack([getattr(t, name) for t in traces])
        raise AttributeError(f"BatchTrace has no column {name!r}")

    def to_pandas(self):
        """One row per configuration and layer, with a `config` column."""
        columns = {"config": np.repeat(np.arange(len(self.traces)), [len(t) for t in self.traces])}
        for name in (self.traces[0].columns if self.traces else []):
            columns[name] = np.concatenate([getattr(t, name) for t in self.traces])
        return _frame(columns)


class PositionTrace(_Columns):
    """Each position's moments through a decoder (trace_positions,
    trace_position_gradients): `position` the 1-based positions, columns 2-D
    arrays [layer, position] (mid_ columns NaN at layer 0)."""

    def __init__(self, result):
        self.position = result.pop("position")
        self._columns = result

    def to_pandas(self):
        """One row per layer and position."""
        layers, positions = next(iter(self._columns.values())).shape
        columns = {"layer": np.repeat(np.arange(layers), positions), "position": np.tile(self.position, layers)}
        for name, values in self._columns.items():
            columns[name] = values.reshape(-1)
        return _frame(columns)


def schemes():
    """The initialization schemes: name, architecture, reference."""
    return _core.schemes()


def _grad(grad):
    if grad is None:
        return GradMoments()
    if isinstance(grad, dict):
        return GradMoments(**grad)
    if not isinstance(grad, GradMoments):
        raise TypeError(f"grad must be a GradMoments or a dict, not {type(grad).__name__}")
    return grad


def _config(config):
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a sigprop.ModelConfig, not {type(config).__name__}")
    return config


def default_scheme(config):
    """The scheme a configuration is initialized with when none is named:
    a Hugging Face config's model's own (config.hf["scheme"]: bert, gpt2 or
    llama at its initializer_range), otherwise xavier (as `sigprop table`)."""
    hf = _config(config).hf
    return hf["scheme"] if hf else "xavier"


def initialize(config, scheme=None, *, beta2_k=None, beta2_alpha=None, **overrides):
    """Per-layer weights of `scheme` (see schemes(); default
    default_scheme(config)) for `config`. beta2_k,
    beta2_alpha: the residual scaling beta^2 = k/N^alpha (dslm schemes
    always; others when given); overrides: embedding_var, q_var, k_var,
    v_var, o_var, ffn1_var, ffn2_var replacing the scheme's variances."""
    return _core.initialize(_config(config), scheme or default_scheme(config), beta2_k, beta2_alpha, overrides)


def _weights(config, weights):
    if weights is None or isinstance(weights, str):
        return initialize(config, weights)
    if not isinstance(weights, ModelWeights):
        raise TypeError(f"weights must be a ModelWeights (initialize()) or a scheme name, not {type(weights).__name__}")
    return weights


def trace(config, weights=None, grad=None, position_gradients=True):
    """The per-layer trace of `config` with `weights` (a ModelWeights from
    initialize(), or a scheme name; default default_scheme(config)); `grad` the gradient
    moments at the model output (default variance 1, correlation 0).
    position_gradients (default): for a causal Pre-LN model, every row's
    gradient the average over the positions of each position's gradient (as
    `sigprop table` prints it; what a measurement over the whole sequence
    gives); False: the gradient of the sequence-averaged state."""
    return Trace(_core.trace(_config(config), _weights(config, weights), _grad(grad), bool(position_gradients)))


def embedding_input(config, token_var, position_var=0.0, segment_var=0.0, scale=1.0):
    """The model input of `config`'s embedding (its tables: token_table,
    position_table, segment_table; vocab, seq_len, dropout,
    embedding_layernorm) when each table has its own per-entry variance:
    (the embedding's output after dropout, the model input) as Moments."""
    return _core.embedding_input(_config(config), float(token_var), float(position_var), float(segment_var),
                                 float(scale))


def trace_batch(configs, weights=None, grad=None):
    """The traces of many configurations in one call of the C++ batched
    trace (one SIMD lane each); they must share arch, activation, layers,
    norm, causal, gated_ffn, final_layernorm and rotary_base. `weights`: a
    list of ModelWeights, or one scheme name for all."""
    configs = [_config(c) for c in configs]
    if weights is None or isinstance(weights, str):
        weights = [initialize(c, weights) for c in configs]
    weights = [_weights(c, w) for c, w in zip(configs, weights)]
    if len(weights) != len(configs):
        raise ValueError(f"trace_batch: {len(configs)} configs but {len(weights)} weights")
    return BatchTrace([Trace(r) for r in _core.trace_batch(configs, weights, _grad(grad))])


def _positions(positions):
    if positions is None:
        return []
    return [int(p) for p in positions]


def trace_positions(config, weights=None, positions=None):
    """Each position's forward moments through a causal model (1-based
    positions, default all)."""
    return PositionTrace(_core.trace_positions(_config(config), _weights(config, weights), _positions(positions)))


def trace_position_gradients(config, weights=None, positions=None, grad=None):
    """Each position's gradient moments through a causal Pre-LN model."""
    return PositionTrace(_core.trace_position_gradients(_config(config), _weights(config, weights),
                                                        _positions(positions), _grad(grad)))


def from_hf_config(path_or_dict, seq_len=None):
    """A ModelConfig from a Hugging Face config.json (a path or its dict):
    model types bert, roberta, gpt2, llama, mistral, qwen2; `seq_len`
    replaces max_position_embeddings. config.hf has every parsed value,
    including those not modelled yet (docs/python.md)."""
    if isinstance(path_or_dict, dict):
        return _core.parse_hf_config(json.dumps(path_or_dict), seq_len)
    if isinstance(path_or_dict, (str, os.PathLike)):
        return _core.read_hf_config(os.fspath(path_or_dict), seq_len)
    raise TypeError(f"from_hf_config takes a path or a dict, not {type(path_or_dict).__name__}")


# ---- components (those of `sigprop component`) ------------------------------

def _word(key, value):
    """One value of a CLI flag, as the C++ parser reads it."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{key} must be a number or a string, not bool")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    raise TypeError(f"{key} must be a number or a string, not {type(value).__name__}")


def _list_word(key, value):
    if isinstance(value, (list, tuple, range, np.ndarray)):
        if len(value) == 0:
            raise ValueError(f"{key} = [] is outside the valid range: a non-empty list")
        return ",".join(_word(key, v) for v in value)
    return _word(key, value)


class Component:
    """One component of the calculus (the components of `sigprop
    component`): forward(moments) -> Moments, backward(moments, grad) ->
    GradMoments, domain(moments) -> dict of validity measures."""

    name = None
    parameters = ()

    def __init__(self, **parameters):
        words = []
        for key, value in parameters.items():
            if key not in self.parameters:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {key!r} "
                                f"(parameters: {', '.join(self.parameters) or 'none'})")
            words += ["--" + key.replace("_", "-"), _list_word(key, value)]
        self._parameters = dict(parameters)
        self._words = words

    def evaluate(self, moments=None, grad=None):
        moments = Moments() if moments is None else moments
        if not isinstance(moments, Moments):
            raise TypeError(f"moments must be a sigprop.Moments, not {type(moments).__name__}")
        return _core.evaluate_component(self.name, self._words, moments, _grad(grad))

    def forward(self, moments):
        return self.evaluate(moments).forward

    def backward(self, moments, grad):
        return self.evaluate(moments, grad).backward

    def domain(self, moments):
        return self.evaluate(moments).domain

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._parameters.items())
        return f"{type(self).__name__}({args})"


_CLASS_NAMES = {"layernorm": "LayerNorm"}


def _component_classes():
    classes = {}
    for name, flags, help_text in _core.components():
        class_name = _CLASS_NAMES.get(name, name.capitalize())
        classes[class_name] = type(class_name, (Component,), {
            "name": name,
            "parameters": tuple(f.replace("-", "_") for f in flags),
            "__doc__": f"The {name} component; parameters (defaults): {' '.join(help_text.split())}",
        })
    return classes


globals().update(_component_classes())
__all__ += list(_component_classes())


def components():
    """The component classes by name."""
    return {c.name: c for c in _component_classes().values()}


# ---- sweeps ------------------------------------------------------------------

# The grid keys in the order of the CLI's nested loops (cli/sweep_command.hpp):
# splitting the leading ones keeps the rows in the CLI's order.
_LOOP_ORDER = ("arch", "scheme", "layers", "d", "dropout", "beta2_k", "beta2_alpha")


def _sweep_words(grid, bounds):
    words = []
    for key, value in grid.items():
        if not isinstance(key, str):
            raise TypeError(f"sweep grid keys must be strings, not {type(key).__name__}")
        words += ["--" + key.replace("_", "-"), _list_word(key, value)]
    words += ["--bounds", f"{_word('bounds', bounds[0])},{_word('bounds', bounds[1])}"]
    return words


def _sweep_chunk(grid, bounds):
    """The rows of one sub-grid (run by an executor's workers)."""
    return _core.sweep_table(_sweep_words(grid, bounds))


def _split(grid, target):
    """Sub-grids whose rows, concatenated, are the grid's rows in order."""
    chunks = [dict(grid)]
    for key in _LOOP_ORDER:
        if len(chunks) >= target:
            break
        values = grid.get(key)
        if not isinstance(values, (list, tuple, range, np.ndarray)) or len(values) < 2:
            if isinstance(values, str) and ":" in values:
                break  # a range START:STOP:STEP: the keys after it cannot be split in order
            continue
        chunks = [dict(c, **{key: [v]}) for c in chunks for v in values]
    return chunks


def sweep(grid, bounds=(0.5, 2), executor=None, chunks=None):
    """Summary figures for every design of `grid`, a dict keyed like the
    CLI's sweep flags (arch, scheme, layers, d, dropout, beta2_k,
    beta2_alpha: lists; head_dim, ffn_mult, activation, seq, rotary,
    hf_config: one value), one row per design in the CLI's order, as a
    pandas DataFrame (a dict of lists without pandas). The C++ work
    releases the GIL; `executor` (concurrent.futures-style: submit() and
    result(), e.g. a thread or process pool or a dask.distributed Client)
    evaluates sub-grids in parallel, `chunks` of them (default 4 per
    worker, at least 8)."""
    if not isinstance(grid, dict):
        raise TypeError(f"sweep grid must be a dict, not {type(grid).__name__}")
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise TypeError("sweep bounds must be a pair (low, high)")
    if executor is None:
        parts = [_sweep_chunk(grid, bounds)]
    else:
        if chunks is None:
            workers = getattr(executor, "_max_workers", None) or 2
            chunks = max(8, 4 * workers)
        futures = [executor.submit(_sweep_chunk, g, bounds) for g in _split(grid, chunks)]
        parts = [f.result() for f in futures]
    columns = {name: list(itertools.chain.from_iterable(p[name] for p in parts)) for name in parts[0]}
    return _frame(columns)
