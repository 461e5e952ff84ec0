"""Probe: why the atomic MSELoss reads 3.89 us batched in one process and 4.33 in others."""

import statistics
import sys

import torch

from kernelwatch.collect.accuracy import case_seed
from kernelwatch.collect.backends import Backend
from kernelwatch.collect.inputs import drawn_on
from kernelwatch.kernels import discover

spec = discover()["mse_loss"]
cases = {c.key: c for c in spec.perf_cases()}
dev = torch.device("cuda")
b = Backend(dev)
b.activate()


def calls(key, seed):
    c = cases[key]
    with drawn_on(dev):
        inp = spec.make_inputs(c, dev, seed)
    return spec.implementations(c, inp)["triton"]


def t(fn, n=100):
    vals = [statistics.median(b.device_samples(fn, rep_ms=20.0, calls=n)[0]) * 1e3 for _ in range(5)]
    return f"{statistics.median(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})"


tag = sys.argv[1]
small = "mse_loss/atomic/fp32/direction=fwd,reduction=mean,shape=4096"
pers = "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=4096"
big = next(k for k in cases if k.startswith("mse_loss/atomic/fp32") and k.endswith("shape=268435456"))
f1 = calls(small, 1234)
print(tag, "atomic fresh seed1234", t(f1), "one call", t(f1, 1), flush=True)
f2 = calls(small, case_seed(cases[small]))
print(tag, "atomic case seed", t(f2), flush=True)
p1 = calls(pers, 1234)
print(tag, "persistent", t(p1), flush=True)
fb = calls(big, 1)
t(fb, 1)
print(tag, "atomic after the 268M case", t(f1), t(f2), flush=True)
del fb
torch.cuda.empty_cache()
f3 = calls(small, 1234)
print(tag, "atomic new inputs after empty_cache", t(f3), flush=True)
