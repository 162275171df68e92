"""Regenerates docs/figures/*.png with sigprop.plot (docs/python.md, "Plots").

    bash scripts/quickstart.sh python         # once: the package in .venv
    .venv/bin/python scripts/figures.py [--layers 192] [--out docs/figures]

- forward_var.png, grad_var.png, corr_len.png, grad_corr_len.png: seven
  models at LAYERS layers (like Figures 1-4 of Kedia et al. 2024);
- depths.png: Pre-LN and Post-LN under Xavier and Post-LN under DeepScaleLM
  at 48, 96 and 192 layers;
- decoder.png: the llama preset under DeepScaleLM, position by position.

Every model has sigprop.ModelConfig's defaults otherwise: d = 768, 12 heads,
sequence length 256, dropout 0.1 (the llama preset: no dropout).
"""

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

try:
    import sigprop
except ImportError as error:
    raise SystemExit(f"{error}: install the package first (bash scripts/quickstart.sh python), "
                     "then run this script with .venv/bin/python") from error

MODELS = [("pre-ln", "xavier"), ("post-ln", "xavier"), ("pre-ln", "dslm"), ("post-ln", "dslm"),
          ("pre-ln", "dslm-simple"), ("llama", "xavier"), ("llama", "dslm")]
SHAPE = "d = 768, 12 heads, L = 256"


def one_quantity(traces, quantity, title, path):
    figure = plt.figure(figsize=(9, 5.6), layout="constrained")
    sigprop.plot(traces, quantity, figure=figure, title=title, path=path)
    plt.close(figure)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=192)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).parents[1] / "docs" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.layers

    traces = {f"{arch} {scheme}": sigprop.trace(sigprop.ModelConfig(arch=arch, layers=n), scheme)
              for arch, scheme in MODELS}
    for quantity, file, title in [("var", "forward_var", "Forward variance of the residual stream"),
                                  ("grad_var", "grad_var", "Gradient variance w.r.t. the residual stream"),
                                  ("corr_len", "corr_len", "Length correlation of the residual stream"),
                                  ("grad_corr_len", "grad_corr_len", "Length correlation of the gradient")]:
        one_quantity(traces, quantity, f"{title} ({n} layers, {SHAPE})", args.out / f"{file}.png")

    depths = {f"{arch} {scheme}, N = {layers}": sigprop.trace(sigprop.ModelConfig(arch=arch, layers=layers), scheme)
              for arch, scheme in [("pre-ln", "xavier"), ("post-ln", "xavier"), ("post-ln", "dslm")]
              for layers in (48, 96, 192)}
    plt.close(sigprop.plot(depths, title=f"Depth: N = 48, 96, 192 layers ({SHAPE})", path=args.out / "depths.png"))

    decoder = sigprop.ModelConfig(arch="llama", layers=48)
    weights = sigprop.initialize(decoder, "dslm")
    positions = [1, 4, 16, 64, 256]
    figure, axes = plt.subplots(1, 3, figsize=(13.5, 3.8), layout="constrained")
    sigprop.plot(sigprop.trace_positions(decoder, weights, positions), ("var", "corr_len"), ax=axes[:2])
    sigprop.plot(sigprop.trace_position_gradients(decoder, weights, positions), "grad_var", ax=axes[2],
                 title=f"llama preset, DeepScaleLM, 48 layers ({SHAPE}), by position",
                 path=args.out / "decoder.png")
    plt.close(figure)
    print(f"wrote {args.out}: forward_var, grad_var, corr_len, grad_corr_len, depths, decoder (.png)")


if __name__ == "__main__":
    main()
