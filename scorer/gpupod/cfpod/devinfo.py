"""What a device run stands on: python3 -m cfpod.devinfo [--device cuda]

Prints, one `key: value` line each: the torch, CUDA and cuDNN versions, the device and its
memory, the TF32 settings in force (the environment overrides NVIDIA's containers set and
torch's own switches: float32 matmuls in TF32 lose ~3 decimal digits, which fails
cfpod.check), the attention features this torch has (fused SDPA, enable_gqa, the
lower-right causal bias), and the kernel each of the pod's three attention calls ran
(profiled on a small input: plain causal, a cached prefix, a tree mask).

TF32_ENV names the environment variables that force TF32; full_float32() switches every
TF32 path off in this process (gpu_check.sh also exports the variables as 0 before python
starts, since some libraries read them once at load).
"""

import argparse
import os
import sys

import torch

from . import attention

TF32_ENV = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")


def full_float32():
    """Float32 matmuls and convolutions in full float32 in this process: the TF32 override
    variables set to 0 (torch reads its override at the first matmul, cuBLAS when its handle
    is created) and torch's TF32 switches off."""
    for k in TF32_ENV:
        os.environ[k] = "0"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")


def tf32_settings():
    """The TF32 state in force: {name: value}."""
    out = {k: os.environ.get(k, "<unset>") for k in TF32_ENV}
    out["torch.backends.cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    out["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    if hasattr(torch, "get_float32_matmul_precision"):
        out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return out


def tf32_forced():
    """True when a float32 matmul may run in TF32 here."""
    s = tf32_settings()
    return (s["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] not in ("<unset>", "0") or
            s["NVIDIA_TF32_OVERRIDE"] not in ("<unset>", "0") or
            s["torch.backends.cuda.matmul.allow_tf32"] or s.get("float32_matmul_precision", "highest") != "highest")


def _kernels(fn, dev):
    """Names of the attention kernels fn() ran (profiled)."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    keys = ("attention", "attn", "flash", "fmha", "cudnn", "sdpa", "softmax", "bmm", "matmul")
    names = sorted({e.key for e in prof.key_averages() if any(k in e.key.lower() for k in keys)})
    return names


def sdpa_kernels(dev, dtype):
    """{call: kernel names} for the pod's three attention calls on a small input."""
    g = torch.Generator(device=dev).manual_seed(0)
    H, KV, D, S, T = 8, 2, 64, 256, 64
    q = torch.rand(T, H, D, generator=g, device=dev).to(dtype)
    K = torch.rand(KV, S, D, generator=g, device=dev).to(dtype)
    V = torch.rand(KV, S, D, generator=g, device=dev).to(dtype)
    use = dev.type == "cuda" and attention.HAS_SDPA
    node = torch.arange(S, device=dev) // 32
    anc = torch.ones(8, 8, dtype=torch.bool, device=dev).tril()
    calls = {
        "causal (a whole sequence)": lambda: attention.attend(q[:, :, :], K[:, :T], V[:, :T], causal=True, use_sdpa=use),
        "cached prefix (a walk edge)": lambda: attention.attend(q, K, V, causal=True, use_sdpa=use),
        "tree mask (a pack)": lambda: attention.attend(q, K, V, mask=(anc[node[S - T:]][:, node]
                                                                      & (torch.arange(S, device=dev)[None, :]
                                                                         <= torch.arange(S - T, S, device=dev)[:, None])),
                                                       use_sdpa=use),
    }
    return {k: _kernels(fn, dev) for k, fn in calls.items()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="cfpod.devinfo", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--full-float32", action="store_true", help="switch TF32 off first (as the pod's checks do)")
    a = p.parse_args(argv)
    if a.full_float32:
        full_float32()
    dev = torch.device(a.device)
    print(f"python: {sys.version.split()[0]}")
    print(f"torch: {torch.__version__}")
    print(f"cuda: {torch.version.cuda}")
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(f"cudnn: {cudnn}")
    if dev.type == "cuda":
        pr = torch.cuda.get_device_properties(dev)
        print(f"device: {pr.name}, {pr.total_memory / 2 ** 30:.1f} GiB, compute capability {pr.major}.{pr.minor}")
    else:
        print(f"device: {dev} ({torch.get_num_threads()} threads)")
    for k, v in tf32_settings().items():
        print(f"tf32 {k}: {v}")
    print(f"tf32 forced: {tf32_forced()}")
    print(f"sdpa: {attention.HAS_SDPA}; enable_gqa: {attention.HAS_GQA}; lower-right causal bias: "
          f"{attention.HAS_LOWER_RIGHT}; both at once: {attention.HAS_LOWER_RIGHT_GQA}")
    from .model import dtype_from_name
    for call, names in sdpa_kernels(dev, dtype_from_name(a.dtype)).items():
        print(f"kernels {call}: {', '.join(names) or '(none profiled)'}")
    if dev.type == "cuda":
        print(f"peak memory: {torch.cuda.max_memory_allocated(dev) / 2 ** 30:.3f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
