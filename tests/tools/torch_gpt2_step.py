#!/usr/bin/env python3
"""The yardstick for shardlab's CUDA device: one GPT-2-small training step in PyTorch eager fp32.

The same model as common/model/model.h (token + position embeddings, pre-norm blocks with causal
self-attention and a GELU-tanh MLP, final layernorm, LM head tied to the token embedding,
cross-entropy, AdamW with betas 0.9/0.95), the same shapes, fp32 everywhere and TF32 off (as
PyTorch's default for fp32 matmuls and as shardlab's cuBLAS calls). Prints the mean step time
over timed steps after warm-up, to set beside shardlab's measured step at world 1:

  python3 tests/tools/torch_gpt2_step.py --batch 8 --seq-len 1024
  build/chapters/shardlab_ch02 --device cuda --model gpt2-small --global-batch 8 --seq-len 1024 \\
      --steps 10 --skip-reference

A benchmark for a machine with a GPU and PyTorch; not a test.
"""
import argparse
import gzip
import os
import shutil
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V=50257, maxT=1024, L=12, C=768, NH=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # the head is tied to the token embedding
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trace", metavar="FILE.json.gz",
                   help="then profile one more step (PyTorch profiler, CPU + CUDA) and write its Kineto trace here")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device visible to PyTorch")
        raise SystemExit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    idx = torch.randint(0, 50257, (a.batch, a.seq_len), device=dev)
    targets = torch.randint(0, 50257, (a.batch, a.seq_len), device=dev)

    def step():
        with record_function("forward"):
            opt.zero_grad(set_to_none=False)
            loss = model(idx, targets)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        return loss.item()  # like shardlab's step: ends in a device synchronize

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    ms = (time.perf_counter() - t0) / a.steps * 1e3
    params = sum(p.numel() for p in model.parameters())
    print(f"PyTorch {torch.__version__} eager fp32 on {torch.cuda.get_device_name()}: GPT-2 small "
          f"({params:,} parameters), batch {a.batch} x {a.seq_len}: {ms:.2f} ms per step, "
          f"{a.batch * a.seq_len / ms * 1e3:,.0f} tokens/s (mean of {a.steps} after {a.warmup} warm-up)")
    time_attention(a.batch, a.seq_len)
    if a.trace:
        write_trace(step, a.trace)


def time_attention(B, T, NH=12, hs=64, reps=20):
    """One layer's causal attention alone, forward and backward, at the step's shapes: the
    figures shardlab's attention kernels are held to (bench_cuda_ops prints its own beside)."""
    q, k, v = (torch.randn(B, NH, T, hs, device="cuda", requires_grad=True) for _ in range(3))
    dout = torch.randn(B, NH, T, hs, device="cuda")

    def ms_per_call(fn):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps

    forward = ms_per_call(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    backward = ms_per_call(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    print(f"scaled_dot_product_attention fp32, causal, B {B} NH {NH} T {T} hs {hs}: "
          f"forward {forward:.3f} ms, backward {backward:.3f} ms per layer (mean of {reps})")


def write_trace(step, path):
    """One step under the PyTorch profiler (after one profiled warm-up), as a gzipped Kineto trace:
    a current PyTorch's spellings of GPU kernels, runtime calls and flows, for the viewer's tests."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(raw)) as prof:
            for _ in range(2):
                step()
                prof.step()
        with open(raw, "rb") as f, gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as g:
            shutil.copyfileobj(f, g)
    print(f"trace of one step: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
