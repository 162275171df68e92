"""The attention sublayer's gradient gain in a deep causal Pre-LN stack, measured in plain PyTorch.

The model is decoder_depth's "gpt2 xavier" at dropout 0 (docs/decoders.md, "Decoders at depth"):
d = 128, 2 heads, L = 64, Xavier weights per head (q, k, v: N(0, 2/(d + d_k)); o: 1/d; FFN:
2/(d + 4d)), tanh GeLU, no biases, LayerNorm at its initial affine, input of variance 1 and
length correlation 0.2. For every layer n it prints, as mean +- standard error over the draws
of the weights:

  var, corr        the stream's variance and length correlation at the layer's input;
  real             Var[g_in]/Var[g_out] - 1 of the attention sublayer x + Attn(LN(x)) for an
                   i.i.d. N(0, 1) upstream gradient g_out, at the real stream x;
  gaussian         the same at a Gaussian stream with the real stream's mean L x L covariance
                   of positions (its pairs; no per-sequence fluctuation around them);
  value path       both again with the softmax weights held fixed (the value path alone);
  own / other      the gain with the stack's own backpropagated gradient at the sublayer's
                   output, and with another sequence's (the batch rolled by one);
  hidden cov       gaussian, with the real stream's mean d x d covariance of hidden units as well
                   (its anisotropy);
  sequence corr    gaussian, each sequence's mean pairs rescaled to that real sequence's own
                   length correlation (the per-sequence correlation, the pairs' shape fixed);
  own pairs        rows with exactly each real sequence's L x L pairs X X^T/d, in random
                   directions (a random orthonormal frame; the rest of the real rows dropped);
  mean pairs       rows with exactly the mean pairs in a random frame (no fluctuation at all).

`build/examples/decoder_depth --dropout 0 --diagnose 0 --layers 12` prints the closed form's
gain for the same i.i.d. upstream gradient at the trace's averaged state.

    /usr/bin/python3 scripts/attention_gain_probe.py [--layers 12] [--draws 64] [--batch 16] [--seed 1]
"""

import argparse
import math

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--draws", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(a.seed)
    d, H, L, N, B = a.d, a.heads, a.seq, a.layers, a.batch
    dk = d // H
    mask = torch.triu(torch.full((L, L), float("-inf")), 1)
    value_only = [False]

    def normal(rows, cols, var):
        return torch.randn(rows, cols) * math.sqrt(var)

    def layer_weights():
        per_head = 2 / (d + dk)
        return {"q": normal(d, d, per_head), "k": normal(d, d, per_head), "v": normal(d, d, per_head),
                "o": normal(d, d, 1 / d), "ffn1": normal(d, 4 * d, 2 / (5 * d)), "ffn2": normal(4 * d, d, 2 / (5 * d))}

    def norm(x):
        return torch.nn.functional.layer_norm(x, (d,))

    def heads(x, w):
        return (x @ w).view(x.shape[0], L, H, dk).transpose(1, 2)

    def attention(h, W):
        q, k, v = heads(h, W["q"]), heads(h, W["k"]), heads(h, W["v"])
        P = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dk) + mask, -1)
        if value_only[0]:
            P = P.detach()
        return (P @ v).transpose(1, 2).reshape(h.shape[0], L, d) @ W["o"]

    def ffn(h, W):
        return torch.nn.functional.gelu(h @ W["ffn1"], approximate="tanh") @ W["ffn2"]

    def gain(x, W, g):
        x = x.detach().requires_grad_()
        out = x + attention(norm(x), W)
        (g_in,) = torch.autograd.grad(out, x, g)
        return float(g_in.pow(2).sum() / g.pow(2).sum() - 1)

    names = ["var", "corr", "real", "gaussian", "real value path", "gaussian value path", "own", "other",
             "hidden cov", "sequence corr", "own pairs", "mean pairs"]
    per_draw = torch.zeros(a.draws, N, len(names))
    draws = []
    covariance = [torch.zeros(L, L) for _ in range(N)]
    hidden = [torch.zeros(d, d) for _ in range(N)]
    for t in range(a.draws):  # the stacks, their streams and their own gradients
        Ws = [layer_weights() for _ in range(N)]
        shared = torch.randn(B, 1, d)
        x = (math.sqrt(0.2) * shared + math.sqrt(0.8) * torch.randn(B, L, d)).requires_grad_()
        streams, mids = [], []
        for n, W in enumerate(Ws):
            streams.append(x.detach())
            C = torch.einsum("bid,bjd->ij", x.detach(), x.detach()) / (B * d)
            covariance[n] += C / a.draws
            hidden[n] += torch.einsum("bid,bie->de", x.detach(), x.detach()) / (B * L * a.draws)
            per_draw[t, n, 0] = C.trace() / L
            per_draw[t, n, 1] = (C.sum() - C.trace()) / (L - 1) / C.trace()
            mid = x + attention(norm(x), W)
            mid.retain_grad()
            mids.append(mid)
            x = mid + ffn(norm(mid), W)
        (x * torch.randn_like(x)).sum().backward()
        rolled = torch.roll(torch.arange(B), 1)
        for n, W in enumerate(Ws):
            g = mids[n].grad
            per_draw[t, n, 6] = gain(streams[n], W, g)
            per_draw[t, n, 7] = gain(streams[n], W, g[rolled])
        draws.append((Ws, streams))
    roots = [torch.linalg.cholesky(C + 1e-12 * torch.eye(L)) for C in covariance]
    hidden_roots = [torch.linalg.cholesky(S * d / S.trace() + 1e-10 * torch.eye(d)) for S in hidden]
    extra = torch.Generator().manual_seed(a.seed + 1)  # the last four columns' draws, apart from the rest

    def mean_corr(C):
        diagonal = C.diagonal(dim1=-2, dim2=-1)
        return (C.sum((-1, -2)) - diagonal.sum(-1)) / (L * (L - 1)) / diagonal.mean(-1)
    for t, (Ws, streams) in enumerate(draws):  # the i.i.d. upstream gradient, real and Gaussian streams
        for n, W in enumerate(Ws):
            gaussian = torch.einsum("ij,bjd->bid", roots[n], torch.randn(B, L, d))
            g = torch.randn(B, L, d)
            for column, (stream, fixed) in enumerate(
                    [(streams[n], False), (gaussian, False), (streams[n], True), (gaussian, True)]):
                value_only[0] = fixed
                per_draw[t, n, 2 + column] = gain(stream, W, g)
            value_only[0] = False
            z = torch.randn(B, L, d, generator=extra)
            per_draw[t, n, 8] = gain(torch.einsum("ij,bjd->bid", roots[n], z) @ hidden_roots[n].T, W, g)
            own = torch.einsum("bid,bjd->bij", streams[n], streams[n]) / d
            scale = covariance[n].diagonal().mean()
            mean_pairs, r = covariance[n] / scale, mean_corr(own)
            r_mean = mean_corr(mean_pairs)
            rescaled = r[:, None, None] + ((1 - r) / (1 - r_mean))[:, None, None] * (mean_pairs - r_mean)
            root = torch.linalg.cholesky(scale * rescaled + 1e-9 * torch.eye(L))
            per_draw[t, n, 9] = gain(torch.einsum("bij,bjd->bid", root, z), W, g)
            frame = torch.linalg.qr(torch.randn(B, d, L, generator=extra))[0].transpose(1, 2) * math.sqrt(d)
            root = torch.linalg.cholesky(own + 1e-9 * torch.eye(L))
            per_draw[t, n, 10] = gain(torch.einsum("bij,bjd->bid", root, frame), W, g)
            per_draw[t, n, 11] = gain(torch.einsum("ij,bjd->bid", roots[n], frame), W, g)
    mean = per_draw.mean(0)
    se = per_draw.std(0) / math.sqrt(a.draws)
    print("| n | " + " | ".join(names) + " |")
    print("|" + "---|" * (len(names) + 1))
    for n in range(N):
        cells = [f"{mean[n, j]:.4f}" if j < 2 else f"{mean[n, j]:.5f} +- {se[n, j]:.5f}" for j in range(len(names))]
        print(f"| {n + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
