"""The GPU's figures for prompts (knowledge injection): SM count, memory bandwidth, L2, shared
memory. Read in a short-lived child process, so the engine process never holds a CUDA context
(the evaluator's workers own the GPU)."""
from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import json, torch
if not torch.cuda.is_available():
    print(json.dumps(None)); raise SystemExit
p = torch.cuda.get_device_properties(0)
g = lambda name: getattr(p, name, None)
bw = None
if g("memory_clock_rate") and g("memory_bus_width"):  # kHz, bits; double data rate
    bw = 2 * g("memory_clock_rate") * 1e3 * g("memory_bus_width") / 8
print(json.dumps({"name": p.name, "sms": p.multi_processor_count, "memory_gb": p.total_memory / 2**30,
                  "l2_mb": (g("L2_cache_size") or 0) / 2**20, "smem_per_block_kb": (g("shared_memory_per_block_optin")
                  or g("shared_memory_per_block") or 0) / 1024, "smem_per_sm_kb":
                  (g("shared_memory_per_multiprocessor") or 0) / 1024, "bandwidth_gbs": bw and bw / 1e9,
                  "capability": f"{p.major}.{p.minor}", "warp": g("warp_size") or 32}))
"""
# vendor figures where the driver's clock fields are missing or misleading (HBM)
KNOWN_BANDWIDTH_GBS = {"H100 SXM": 3350, "H100 PCIe": 2000, "H100 NVL": 3900, "H200": 4800, "A100-SXM4-80GB": 2039,
                       "A100-SXM4-40GB": 1555, "A100-PCIE": 1555, "L40S": 864, "MI300X": 5300}


def detect(timeout_s: float = 60.0) -> dict | None:
    try:
        p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
        info = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return None
    if info:
        for key, gbs in KNOWN_BANDWIDTH_GBS.items():
            if key.lower() in info["name"].lower():
                info["bandwidth_gbs"] = gbs
    return info


def describe(info: dict | None) -> str:
    if not info:
        return ("No GPU was detected where the engine runs (e.g. a CPU test run under the Triton interpreter); "
                "write for a recent NVIDIA data-centre GPU (e.g. H100: 132 SMs, ~3.3 TB/s HBM, 50 MB L2, "
                "228 KB shared memory per SM).")
    bw = f"{info['bandwidth_gbs']:.0f} GB/s" if info.get("bandwidth_gbs") else "unknown"
    return (f"{info['name']} (compute capability {info['capability']}): {info['sms']} SMs, memory bandwidth "
            f"{bw}, {info['memory_gb']:.0f} GB memory, L2 {info['l2_mb']:.0f} MB, shared memory "
            f"{info['smem_per_block_kb']:.0f} KB per block ({info['smem_per_sm_kb']:.0f} KB per SM), "
            f"warp size {info['warp']}.")
