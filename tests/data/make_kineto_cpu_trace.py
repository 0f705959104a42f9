"""Writes kineto_cpu_torch2.15.pt.trace.json.gz: a real PyTorch profiler (Kineto) trace of three
training steps of a small MLP on the CPU (PyTorch 2.15.0, CPU activities only: no GPU here).

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch   # (PyPI; a CPU run needs no GPU)
    /tmp/tv/bin/python tests/data/make_kineto_cpu_trace.py

The viewer test tests/viewer/viewer_test_kineto.cpp reads the result; times differ from run to run.
"""
import gzip
import os
import shutil

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "kineto_cpu_torch2.15.pt.trace.json")

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(out), record_shapes=True, profile_memory=True) as prof:
    for _ in range(6):  # steps 0-1 skipped and warmed up, ProfilerStep#2 to #4 recorded
        with record_function("forward"):
            loss = nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        prof.step()

with open(out, "rb") as f, gzip.GzipFile(out + ".gz", "wb", compresslevel=9, mtime=0) as g:
    shutil.copyfileobj(f, g)
os.remove(out)
print(out + ".gz", torch.__version__)
