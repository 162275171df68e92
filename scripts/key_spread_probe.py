"""The keys' spread of a deep causal stack, measured in plain PyTorch (docs/decoders.md, "The keys' spread").

The model is attention_gain_probe.py's (decoder_depth's "gpt2 xavier" at dropout 0: d = 128, 2 heads,
L = 64, Xavier weights per head, tanh GeLU, no biases, input of variance 1 and length correlation 0.2).
First the stack's mean L x L covariance of positions at every attention input (after the norm), over
--draws draws of --batch sequences. Then, for the listed layers, one attention head pair (fresh Xavier
weights per draw) on Gaussian streams with that covariance and with one correlation for every pair (the
same mean), for an i.i.d. upstream gradient, each path alone: the value path (softmax weights fixed), the
query path (K and V fixed) and the key path (Q and V fixed). It prints the paths' gains at one correlation
and the ratios real pairs / one correlation (mean +- standard error over the draws), beside the keys'
spread CausalAttention::spread_of_pairs gives for the covariance (query and key factor, uniform weights).
Before that, the covariance's shape: each position's mean correlation with the others, the later half's
correlation by lag, and position 1's correlation with a few others.
With --rotary B the heads turn their queries and keys (base B) in the second part; the query path's
factor is then the closed form's for the rotated keys (the spread's query factor on the position-specific
part, its key factor on the rotated shared part), without rotation the query factor itself; the R o T
form takes the rotated keys' covariance as R o T (T_km the mean over the coordinate pairs of
cos((k - m) theta_j)) and the query path as sum_i w_i <H R_i H, H (R o T)_i H>/(i - 1), against the same
at one correlation; the lag-weighted R o T form weights each pair of keys k, m in it by exp(beta (T_km - 1)),
the lognormal weight the rotated shared part of the scores gives two keys, beta = (2 d/(d + d_k))^2 r^2 the
shared part's score variance for these heads.

    /usr/bin/python3 scripts/key_spread_probe.py [--layers 3,6,9,12] [--draws 8] [--paths-draws 16] [--rotary 0]
"""

import argparse
import math

import torch


def keys_spread(R, r, turns=None, beta=0.0):
    """spread_of_pairs: over queries i = 2..L, w_i = (i - 1)/i^2, K_i = H R_i H. With rotary
    embeddings (turns: T_km = the mean over the coordinate pairs of cos((k - m) theta_j)), also
    the factor the closed form then gives the query path, (query pos^2 + key pos rot)/(pos^2 + pos rot)
    with pos rot = sum w_i <H R1_i H, H (R1 o T)_i H>/(i - 1) - pos^2 at one correlation R1."""
    L = R.shape[0]
    query = key = weights = rotated = turned = 0.0
    lag = torch.exp(beta * (turns - 1)) if turns is not None else None
    one = torch.full((L, L), r)
    one.fill_diagonal_(1.0)
    for i in range(2, L + 1):
        H = torch.eye(i) - 1.0 / i
        K = H @ R[:i, :i] @ H
        w = (i - 1) / i**2
        query += w * float((K * K).sum()) / (i - 1)
        key += w * float(K.trace()) / (i - 1)
        weights += w
        if turns is not None:
            K1 = H @ one[:i, :i] @ H
            rotated += w * float((K1 * lag[:i, :i] * one[:i, :i] * turns[:i, :i]).sum()) / (i - 1)
            turned += w * float((K * lag[:i, :i] * R[:i, :i] * turns[:i, :i]).sum()) / (i - 1)
    pos = (1 - r) ** 2
    query, key = query / (weights * pos), key / (weights * (1 - r))
    if turns is None:
        return query, key, query, query
    share = rotated / weights - pos
    return query, key, (query * pos + key * share) / (pos + share), turned / rotated


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--layers", default="3,6,9,12")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--paths-draws", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rotary", type=float, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(a.seed)
    d, H, L, B = a.d, a.heads, a.seq, a.batch
    dk = d // H
    layers = [int(n) for n in a.layers.split(",")]
    N = max(layers)
    mask = torch.triu(torch.full((L, L), float("-inf")), 1)
    per_head = 2 / (d + dk)

    def normal(rows, cols, var):
        return torch.randn(rows, cols) * math.sqrt(var)

    def heads(x, w):
        return (x @ w).view(x.shape[0], L, H, dk).transpose(1, 2)

    if a.rotary:
        theta = torch.tensor([a.rotary ** (-2 * j / dk) for j in range(dk // 2)])
        angle = torch.arange(L)[:, None] * theta[None, :]
        cos, sin = torch.cos(angle), torch.sin(angle)

    def turn(x, rotate):
        if not rotate:
            return x
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)

    def attention(h, W, fixed=(), rotate=False):
        q, k, v = turn(heads(h, W["q"]), rotate), turn(heads(h, W["k"]), rotate), heads(h, W["v"])
        q, k, v = [t.detach() if name in fixed else t for name, t in zip("qkv", (q, k, v))]
        P = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dk) + mask, -1)
        if "P" in fixed:
            P = P.detach()
        return (P @ v).transpose(1, 2).reshape(h.shape[0], L, d) @ W["o"]

    def norm(x):
        return torch.nn.functional.layer_norm(x, (d,))

    covariance = [torch.zeros(L, L) for _ in range(N)]
    for _ in range(a.draws):  # the stream's pairs at every attention input
        x = math.sqrt(0.2) * torch.randn(B, 1, d) + math.sqrt(0.8) * torch.randn(B, L, d)
        for n in range(N):
            W = {"q": normal(d, d, per_head), "k": normal(d, d, per_head), "v": normal(d, d, per_head),
                 "o": normal(d, d, 1 / d), "ffn1": normal(d, 4 * d, 2 / (5 * d)), "ffn2": normal(4 * d, d, 2 / (5 * d))}
            h = norm(x)
            covariance[n] += torch.einsum("bid,bjd->ij", h, h) / (B * d * a.draws)
            x = x + attention(h, W)
            x = x + torch.nn.functional.gelu(norm(x) @ W["ffn1"], approximate="tanh") @ W["ffn2"]
    print("| layer | mean correlation of position 1, 2, 4, 8, 16, 32, L with the others |"
          " positions L/2..L: correlation at lag 1, 2, 8, L/2 - 1 | position 1 with 2, 8, L |")
    print("|---|---|---|---|")
    for n in layers:
        C = covariance[n - 1]
        root = C.diagonal().sqrt()
        R = C / root[:, None] / root[None, :]
        others = (R.sum(1) - 1) / (L - 1)
        late = R[L // 2:, L // 2:]
        print(f"| {n} | " + " ".join(f"{float(others[i - 1]):.3f}" for i in (1, 2, 4, 8, 16, 32, L)) + " | " +
              " ".join(f"{float(torch.diagonal(late, lag).mean()):.3f}" for lag in (1, 2, 8, L // 2 - 1)) + " | " +
              " ".join(f"{float(R[0, j - 1]):.3f}" for j in (2, 8, L)) + " |")
    print()
    print("| layer | r | keys' spread (query, key) | the query path's factor | R o T form | lag-weighted R o T form |"
          " one correlation: value /"
          " query / key path gain | real pairs / one correlation: value | query | key |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    turns = None
    if a.rotary:
        lag = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).double()
        turns = torch.cos(lag[:, :, None] * theta).mean(-1)
    paths = {"value": ("P",), "query": ("k", "v"), "key": ("q", "v")}
    for n in layers:
        C = covariance[n - 1]
        root = C.diagonal().sqrt()
        R = C / root[:, None] / root[None, :]
        r = float((R.sum() - R.trace()) / (L * (L - 1)))
        one = torch.full((L, L), r)
        one.fill_diagonal_(1.0)
        factors = [torch.linalg.cholesky(M + 1e-10 * torch.eye(L)) for M in (R, one)]
        gains = torch.zeros(a.paths_draws, 2, 3)
        for t in range(a.paths_draws):
            W = {"q": normal(d, d, per_head), "k": normal(d, d, per_head), "v": normal(d, d, per_head),
                 "o": normal(d, d, 1 / d)}
            z, g = torch.randn(B, L, d), torch.randn(B, L, d)
            for j, factor in enumerate(factors):
                h = torch.einsum("ij,bjd->bid", factor, z)
                for c, fixed in enumerate(paths.values()):
                    x = h.detach().requires_grad_()
                    (g_in,) = torch.autograd.grad(attention(x, W, fixed, a.rotary > 0), x, g)
                    gains[t, j, c] = g_in.pow(2).sum() / g.pow(2).sum()
        ratio = gains[:, 0] / gains[:, 1]
        mean, se = ratio.mean(0), ratio.std(0) / math.sqrt(a.paths_draws)
        at_one = gains[:, 1].mean(0)
        q, k, q_path, q_turned = keys_spread(R, r, turns)
        beta = (2 * d / (d + dk)) ** 2 * r**2
        q_lagged = keys_spread(R, r, turns, beta)[3]
        cells = " | ".join(f"{mean[c]:.3f} ({se[c]:.3f})" for c in range(3))
        print(f"| {n} | {r:.3f} | {q:.3f}, {k:.3f} | {q_path:.3f} | {q_turned:.3f} | {q_lagged:.3f} | {at_one[0]:.5f} / {at_one[1]:.5f} /"
              f" {at_one[2]:.5f} | {cells} |")


if __name__ == "__main__":
    main()
