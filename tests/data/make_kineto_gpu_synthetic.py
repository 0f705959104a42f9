"""Writes kineto_gpu_synthetic/: a SYNTHETIC two-rank PyTorch profiler trace of one training step
on two GPUs, spelled as Kineto 2.x writes one (no GPU here to record a real one; the events,
categories, args and file names follow traces PyTorch 2.x writes with CUDA and NCCL):

  - files under the profiler's default names (<hostname>_<pid>.<ms>.pt.trace.json), each with
    distributedInfo.rank;
  - python_function frames (with_stack=True) around nn.Module and aten:: ops (cpu_op);
  - launches as cudaLaunchKernel and cudaLaunchKernelExC (cuda_runtime) with ac2g flows to
    their kernels, a cudaMemcpyAsync and its gpu_memcpy, a cudaDeviceSynchronize;
  - record_param_comms (cpu_op) with the collective's args, nccl:all_reduce inside it, and the
    NCCL kernels as NCCL 2.19+ names them (ncclDevKernel_AllReduce_Sum_f32_RING_LL) and as
    earlier versions did (ncclKernel_AllGather_RING_LL_Sum_int8_t), carrying "Collective name",
    "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
    "Process Group Ranks" and "Seq";
  - gpu_user_annotation ranges on the stream (ProfilerStep#1, as Kineto repeats them there);
  - [memory] instants for the GPU (Device Type 1) and the host (Device Type 0).

    python3 tests/data/make_kineto_gpu_synthetic.py

Read by tests/viewer/viewer_test_kineto.cpp and tests/viewer/check_viewer_input.py. Deterministic.
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
out_dir = os.path.join(here, "kineto_gpu_synthetic")


def rank_trace(rank):
    host = 1000 + 1000 * rank          # the Python process's pid (and its main thread's tid)
    late = 20.0 * rank                 # rank 1 reaches the collective 20 us after rank 0
    ev = []

    def x(cat, name, pid, tid, ts, dur, **args):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3)}
        if args:
            e["args"] = args
        ev.append(e)

    def launch(name, ts, dur, corr, kernel, stream, kts, kdur, cat="kernel", **kargs):
        x("cuda_runtime", name, host, host, ts, dur, **{"External id": corr, "cbid": 211, "correlation": corr})
        ev.append({"ph": "s", "id": corr, "pid": host, "tid": host, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        x(cat, kernel, 0, stream, kts, kdur, **{"External id": corr, "device": 0, "stream": stream,
                                                "correlation": corr, "registers per thread": 64,
                                                "shared memory": 0, "grid": [2, 1, 1], "block": [512, 1, 1]},
          **kargs)
        ev.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": kts, "cat": "ac2g", "name": "ac2g",
                   "bp": "e"})

    def memory(ts, device_type, allocated, reserved, size):
        ev.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": host, "tid": host,
                   "ts": ts, "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": size,
                                      "Device Id": 0 if device_type else -1, "Device Type": device_type,
                                      "Addr": 139900000000000 + int(ts)}})

    base = 1700000000000000.0  # microseconds since 1970, as the profiler's clock gives them
    t = lambda us: base + us  # noqa: E731
    group = {"Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}
    allreduce = {"Collective name": "allreduce", "In msg nelems": 65536, "Out msg nelems": 65536, "Group size": 2,
                 "dtype": "Float", "In split size": "[]", "Out split size": "[]", **group, "Seq": 1}
    allgather = {"Collective name": "allgather", "In msg nelems": 1024, "Out msg nelems": 2048, "Group size": 2,
                 "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", **group, "Seq": 2}

    x("user_annotation", "ProfilerStep#1", host, host, t(0), 1000)
    x("python_function", "train.py(40): train_step", host, host, t(2), 990, **{"Python id": 3, "Python parent id": 2,
                                                                             "Python thread": 0})
    # The batch to the GPU.
    x("cpu_op", "aten::to", host, host, t(3), 12, **{"External id": 1, "Input Dims": [[16, 192]]})
    launch("cudaMemcpyAsync", t(4), 6, 100, "Memcpy HtoD (Pageable -> Device)", 7, t(12), 4, cat="gpu_memcpy",
           bytes=12288, **{"memory bandwidth (GB/s)": 3.07})
    memory(t(5), 0, 4096, 0, 4096)
    # Forward: nn.Module frame, linear, addmm, its launch and kernel.
    x("python_function", "nn.Module: Linear_0", host, host, t(20), 190, **{"Python id": 4, "Python parent id": 3,
                                                                        "Python module id": 0})
    x("cpu_op", "aten::linear", host, host, t(22), 180, **{"External id": 2, "Input Dims": [[16, 192], [192, 192], [192]]})
    x("cpu_op", "aten::addmm", host, host, t(25), 170, **{"External id": 3})
    memory(t(26), 1, 8388608, 20971520, 8388608)
    launch("cudaLaunchKernel", t(30), 10, 101, "ampere_sgemm_64x32_sliced1x4_nn", 7, t(50), 200)
    # Backward: a kernel launched with cudaLaunchKernelExC (CUTLASS).
    x("cpu_op", "aten::mm", host, host, t(300), 60, **{"External id": 4})
    launch("cudaLaunchKernelExC", t(305), 12, 102,
           "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", 7, t(320), 150)
    # The gradient all-reduce: record_param_comms, ProcessGroupNCCL's range, the launch, the kernel.
    x("cpu_op", "record_param_comms", host, host, t(500), 60, **{"External id": 5, **allreduce})
    x("cpu_op", "nccl:all_reduce", host, host, t(505), 50, **{"External id": 6})
    memory(t(506), 1, 16777216, 20971520, 8388608)
    launch("cudaLaunchKernelExC", t(510), 20, 103, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
           20, t(600 + late), 150 - late, **allreduce)
    # An all-gather under the older NCCL kernel name.
    x("cpu_op", "record_param_comms", host, host, t(700), 20, **{"External id": 7, **allgather})
    launch("cudaLaunchKernel", t(702), 10, 104, "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", 20,
           t(760 + late), 100 - late, **allgather)
    x("cuda_runtime", "cudaDeviceSynchronize", host, host, t(880), 110, **{"cbid": 165, "correlation": 105})
    # Kineto repeats the step on the streams it ran on.
    x("gpu_user_annotation", "ProfilerStep#1", 0, 7, t(12), 460, **{"External id": 0})
    x("gpu_user_annotation", "ProfilerStep#1", 0, 20, t(600 + late), 260 - late, **{"External id": 0})

    meta = [({"name": "process_name", "pid": host, "tid": 0}, {"name": "python"}),
            ({"name": "process_labels", "pid": host, "tid": 0}, {"labels": "CPU"}),
            ({"name": "thread_name", "pid": host, "tid": host}, {"name": f"thread {host} (python)"}),
            ({"name": "process_name", "pid": 0, "tid": 0}, {"name": "python"}),
            ({"name": "process_labels", "pid": 0, "tid": 0}, {"labels": "GPU 0"}),
            ({"name": "process_sort_index", "pid": 0, "tid": 0}, {"sort_index": 5000000}),
            ({"name": "thread_name", "pid": 0, "tid": 7}, {"name": "stream 7"}),
            ({"name": "thread_name", "pid": 0, "tid": 20}, {"name": "stream 20"})]
    ev = [{"ph": "M", "ts": t(0), **m, "args": a} for m, a in meta] + sorted(ev, key=lambda e: e["ts"])
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                           "pg_size": 2, "ranks": [0, 1]}], "nccl_version": "2.21.5"},
        "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
        "profile_memory": 1, "with_stack": 1, "record_shapes": 1,
        "trace_id": f"5YNTH371C{rank}", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": ev,
        "traceName": f"gpu-node_{host}.1700000000123.pt.trace.json",
    }


def main():
    os.makedirs(out_dir, exist_ok=True)
    for rank in (0, 1):
        trace = rank_trace(rank)
        with open(os.path.join(out_dir, trace["traceName"]), "w") as f:
            json.dump(trace, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
