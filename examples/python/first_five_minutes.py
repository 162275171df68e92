"""A user's first five minutes with sigprop in Python (docs/python.md): a model,
its initialization, its per-layer trace as a table, a Hugging Face config,
a small sweep and a plot. Runs in a few seconds:

    .venv/bin/python examples/python/first_five_minutes.py [OUTPUT_DIR]

(after `bash scripts/quickstart.sh python`); writes first_five_minutes.png
to OUTPUT_DIR (default: the current directory).
"""

import pathlib
import sys

import sigprop

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
out.mkdir(parents=True, exist_ok=True)
repository = pathlib.Path(__file__).resolve().parents[2]

# 1. A model: 48 Post-LN layers of BERT-base's width (every field: print(config)).
config = sigprop.ModelConfig(arch="post-ln", layers=48, d=768, heads=12, activation="gelu")

# 2. Its initialization: per-layer weight variances of a scheme (sigprop.schemes()).
print("schemes:", ", ".join(s["name"] for s in sigprop.schemes()))
xavier = sigprop.initialize(config, "xavier")
print(f"Xavier's first layer: Q variance {xavier.layers[0].q:.3g}")

# 3. The trace: per-layer moments, numpy arrays of length layers + 1 (row 0 the input).
trace = sigprop.trace(config, xavier)
print(f"Post-LN Xavier: gradient variance down to {trace.grad_var.min():.2e} (1 at the output)")
dslm = sigprop.trace(config, "dslm")  # or a scheme's name
print(f"Post-LN DeepScaleLM: gradient variance down to {dslm.grad_var.min():.3f}")

# 4. As a pandas DataFrame, one row per layer boundary.
table = trace.to_pandas()
print(table[["layer", "var", "corr_len", "grad_var", "grad_corr_len"]].iloc[::8].to_string(index=False))

# 5. A Hugging Face config.json, traced under GPT-2's own initialization.
gpt2 = sigprop.from_hf_config(repository / "tests" / "hf_configs" / "gpt2.json", seq_len=256)
gpt2_trace = sigprop.trace(gpt2, "gpt2")
print(f"gpt2 ({gpt2.layers} layers, d = {gpt2.d}): forward variance {gpt2_trace.var[-1]:.3g} at the top")

# 6. A small sweep: which designs keep every layer's variances within [0.1, 10]?
rows = sigprop.sweep({"arch": ["pre-ln", "post-ln"], "scheme": ["xavier", "dslm"], "layers": [24, 96]},
                     bounds=(0.1, 10))
print(rows[["arch", "scheme", "layers", "var_max", "grad_min", "grad_max", "within_bounds"]].to_string(index=False))

# 7. A plot: one panel per quantity, the models overlaid.
sigprop.plot({"post-ln xavier": trace, "post-ln dslm": dslm, "gpt2 (its own init)": gpt2_trace},
             ("var", "grad_var", "corr_len"), path=out / "first_five_minutes.png")
print("wrote", out / "first_five_minutes.png")
