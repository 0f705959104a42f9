"""Writes torch_gloo/{ddp,fsdp}_{2,4}ranks/: real PyTorch profiler (Kineto) traces of one small
model trained with DDP and with FSDP (fully_shard, FSDP2) on 2 and 4 ranks, on the CPU with the
gloo backend (no GPU here), one file per rank under the profiler's default name
(tensorboard_trace_handler: <hostname>_<pid>.<milliseconds>.pt.trace.json.gz).

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch   # (PyPI; a CPU run needs no GPU)
    /tmp/tv/bin/python tests/data/make_torch_gloo_traces.py

Each rank runs 5 steps: 1 skipped, 1 warm-up, 3 recorded (ProfilerStep#2 to #4), with shapes
and memory. The viewer tests (tests/viewer_test_torch.cpp, tests/viewer/check_viewer_input.py) read the
files; they need no torch. Times, pids and hostnames differ from run to run.
"""
import os
import shutil
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

here = os.path.dirname(os.path.abspath(__file__))
STEPS = 5  # wait 1, warm-up 1, active 3


def model():
    """Four blocks of Linear + GELU and a head: 0.2M parameters, the same on every rank."""
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(192, 192), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(192, 10))


def wrap(net, strategy):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(net, bucket_cap_mb=0.1)  # a few buckets, not one
    from torch.distributed.fsdp import fully_shard
    for block in range(4):  # one unit per Linear + GELU, then the root
        fully_shard(net[2 * block])
    return fully_shard(net)


def worker(rank, world, strategy, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    net = wrap(model(), strategy)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank)  # each rank its own shard of the batch
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(out, use_gzip=True), record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(STEPS):
            x, y = torch.randn(16, 192, generator=gen), torch.randint(0, 10, (16,), generator=gen)
            with record_function("forward"):
                loss = nn.functional.cross_entropy(net(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()
    dist.destroy_process_group()


def main():
    for port, (strategy, world) in enumerate([("ddp", 2), ("fsdp", 2), ("ddp", 4), ("fsdp", 4)], start=29611):
        out = os.path.join(here, "torch_gloo", f"{strategy}_{world}ranks")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        mp.spawn(worker, args=(world, strategy, port, out), nprocs=world, join=True)
        sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
        print(out, sizes)
    print("torch", torch.__version__, "on", socket.gethostname())


if __name__ == "__main__":
    main()
