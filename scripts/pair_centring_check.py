"""How well the pair centring's interpolation in the queries' correlation holds.

Two queries whose scores over L keys have variance s2 and correlation rho weight
their keys P_i, P_m (softmax). A pair of queries shares the Jacobian's centring
1 - 2 <P>_pair + X with <P>_pair = E[sum_k P_ik^2 P_mk] / E[sum_k P_ik P_mk] and
X = E[sum_k P_ik P_mk] (docs/components/attention.md, "Corrections", item 10).
The closed form takes <P>_pair at rho = 0 (S2 = E sum_k P_ik^2) and at rho = 1
(the weight of the key a query favours) and interpolates linearly in rho. This
simulates <P>_pair at every rho and prints it beside the linear interpolation of
the simulated end points and the geometric one S2 (<P>/S2)^rho, which the
lognormal limit (L large, P_ik ~ e^{s_ik}/L) gives.

    /usr/bin/python3 scripts/pair_centring_check.py [--samples 200000] [--seed 1]
"""
import argparse

import numpy as np


def pair_weights(rng, L, s2, rho, samples):
    """<P>_pair and X for two queries of score variance s2 and correlation rho."""
    z = rng.standard_normal((samples, L))
    w = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal((samples, L))
    P, M = (np.exp(np.sqrt(s2) * (u - u.max(1, keepdims=True))) for u in (z, w))
    P, M = P / P.sum(1, keepdims=True), M / M.sum(1, keepdims=True)
    cross = (P * M).sum(1).mean()
    return (P * P * M).sum(1).mean() / cross, cross


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    print("| L | score variance | rho | centring, simulated | linear in rho | geometric in rho |")
    print("|---|---|---|---|---|---|")
    for L in (32, 64):
        for s2 in (0.5, 1.42, 2.5):
            S2, _ = pair_weights(rng, L, s2, 0.0, a.samples)
            favoured, _ = pair_weights(rng, L, s2, 1.0, a.samples)
            for rho in (0.2, 0.5, 0.8):
                pair, cross = pair_weights(rng, L, s2, rho, a.samples)
                linear = S2 + rho * (favoured - S2)
                geometric = S2 * (favoured / S2) ** rho
                print(f"| {L} | {s2} | {rho} | {1 - 2 * pair + cross:.4f} | {1 - 2 * linear + cross:.4f} |"
                      f" {1 - 2 * geometric + cross:.4f} |")


if __name__ == "__main__":
    main()
