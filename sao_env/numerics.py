"""Pinned CPU numerics: what decides the float bits of a run, set before torch is loaded.

A run's bits depend on which vector kernels the CPU libraries pick at load time. Measured on a
2-core AMD EPYC with AVX-512 (torch 2.13.0+cpu, MKL 2024.2, 30 actor+critic updates of SAO on
style-drift): ATen's dispatch level (avx512 against avx2) changes the bits of every update; MKL's
conditional-reproducibility mode (``MKL_CBWR``) changes them too; capping MKL's instructions at AVX2
alone does not change them on that machine. So every level is pinned to the one that every x86-64
machine with AVX2 has:

* ``ATEN_CPU_CAPABILITY=avx2``   ATen's own kernels (reductions, softmax, norms, elementwise ops)
* ``MKL_CBWR=AVX2``              MKL's reproducible AVX2 code path (deterministic reductions, fixed
                                 blocking); MKL documents it for Intel CPUs and falls back to its
                                 AUTO branch elsewhere, capped by the next line
* ``MKL_ENABLE_INSTRUCTIONS=AVX2`` MKL never dispatches past AVX2
* ``ONEDNN_MAX_CPU_ISA=AVX2``    oneDNN's JIT kernels
* ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``  the pools' default size (runs set torch's
                                 thread count explicitly; forward passes give the same bits on any
                                 count, backward passes keep one thread)

Cost, measured interleaved on that machine (process CPU seconds of the same 30 updates, 3 rounds):
native 2.7-3.7 s, pinned 3.1-3.4 s: within the run-to-run spread. ``MKL_CBWR=COMPATIBLE`` (SSE2,
the one branch MKL documents for every vendor) costs 1.5x (5.1-5.4 s) and is not used.

Machines without AVX2 (and ARM) cannot take this pin: their runs are marked ``pinned: false`` in
provenance and are not expected to reproduce committed rows bit for bit (``sao-env verify`` then
checks a row against its board's seed interval). ``SAO_ENV_NUMERICS=native`` turns the pin off.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache
from typing import Any

PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""Set (overriding the environment) before torch is imported."""
THREAD_DEFAULTS: dict[str, str] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Set only where the environment does not say otherwise."""

_STATE: dict[str, Any] = {"pinned": False, "reason": "not applied"}


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pin() -> dict[str, Any]:
    """Apply the pin if torch is not loaded yet and the machine has AVX2; returns what was done."""
    if _STATE["reason"] != "not applied":
        return dict(_STATE)
    if os.environ.get("SAO_ENV_NUMERICS", "pinned") == "native":
        _STATE.update(pinned=False, reason="SAO_ENV_NUMERICS=native")
    elif platform.machine().lower() not in ("x86_64", "amd64"):
        _STATE.update(pinned=False, reason=f"not x86-64 ({platform.machine()})")
    elif "avx2" not in cpu_flags():
        _STATE.update(pinned=False, reason="the CPU has no AVX2")
    elif "torch" in sys.modules:
        _STATE.update(pinned=False, reason="torch was imported before sao_env")
    else:
        os.environ.update(PINNED_ENV)
        for key, value in THREAD_DEFAULTS.items():
            os.environ.setdefault(key, value)
        _STATE.update(pinned=True, reason="pinned to AVX2")
    return dict(_STATE)


@lru_cache(maxsize=1)
def numerics_record() -> dict[str, Any]:
    """What decided this process's float bits, for a run's provenance."""
    import torch

    blas = "mkl" if torch.backends.mkl.is_available() else "other"
    return {"pinned": _STATE["pinned"], "reason": _STATE["reason"], "cpu": cpu_model(),
            "machine": platform.machine(), "dispatch": torch.backends.cpu.get_cpu_capability(), "blas": blas,
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA")}
