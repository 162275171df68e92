"""The walkthrough of docs/torch.md: a small GPT-2 whose block 2 forgot the
1/sqrt(2N) of its mlp.c_proj, audited against the gpt2 scheme.

    PYTHONPATH=build/python python3 scripts/torch_walkthrough.py [figure.png]
"""
import sys

import torch

import sigprop.torch
from sigprop.torch_models import GPT2Model

torch.manual_seed(0)
model = GPT2Model(vocab_size=1000, n_positions=64, n_embd=64, n_layer=4, n_head=4,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
with torch.no_grad():
    model.h[2].mlp.c_proj.weight.normal_(0.0, 0.02)   # the bug: N(0, 0.02^2), not N(0, 0.02^2/(2N))

report = sigprop.torch.audit(model, scheme="gpt2")
print(report)
finding = report.findings[0]
print()
print(finding.module, finding.kind, finding.expected, finding.actual)
if len(sys.argv) > 1:
    report.plot(sys.argv[1])
