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
* ``NPY_ENABLE_CPU_FEATURES=X86_V3`` numpy's own SIMD dispatch stops at AVX2 (numpy >= 2.4 names
                                 its targets by x86-64 level; older numpy gets
                                 ``NPY_DISABLE_CPU_FEATURES`` with its AVX-512 targets instead)
* ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``  the pools' default size (runs set torch's
                                 thread count explicitly; forward passes give the same bits on any
                                 count, backward passes keep one thread)

MKL's mode depends on the vendor. On an Intel Xeon (Sapphire Rapids, AVX-512 and AMX), ``MKL_CBWR=AVX2``
engages MKL's AVX2 branch, which there is not consistent within the process: a critic's forward pass with
gradients and the same pass without them gave different bits (tests/test_spine_agents.py), and so did
every run's logs between two calls that should agree. ``AVX2,STRICT`` (MKL's strict conditional
reproducibility for ?gemm) makes them agree; ``AUTO``, ``AVX512`` and the AVX2 branch alone do not. On AMD,
MKL documents ``MKL_CBWR`` for Intel CPUs only, and the mode measured there (``AVX2``, which falls back to
AUTO capped at AVX2) is kept, so the bits recorded on AMD machines stay theirs. The two vendors' kernels
differ: an AMD and an Intel machine give different bits for one pinned run (every mode tried on the Intel
machine: AVX2, AVX2 strict, AUTO, AVX, COMPATIBLE), so recorded bits (tests/test_numerics_pin.py) are kept
per vendor, and a run's provenance names its CPU and MKL mode.

numpy's line was found across machines: the pinned short run of tests/test_numerics_pin.py, recorded
on an AMD EPYC with AVX2 only (family 25), gave other metrics and episodes on an AMD EPYC with AVX-512
(family 25, model 17) while torch was pinned; numpy (2.4.6) dispatched its X86_V4 (AVX-512) kernels
there. With numpy capped at X86_V3, that machine gives the recorded bytes exactly.

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


def _numpy_pin() -> dict[str, str]:
    """The variable that caps numpy's SIMD dispatch at AVX2, in the names of the installed numpy
    (read from its metadata: numpy must not be imported before the pin)."""
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("numpy").split(".")[:2])
    except Exception:  # no numpy, or an unparsable version: the older names are harmless to numpy 2.4+
        major, minor = 0, 0
    if (major, minor) >= (2, 4):
        return {"NPY_ENABLE_CPU_FEATURES": "X86_V3"}
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_AVX512_TARGETS)}


NUMPY_AVX512_TARGETS = ("AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX",
                        "AVX512_CNL", "AVX512_ICL", "AVX512_SPR")
"""numpy < 2.4's dispatch targets past AVX2."""
NUMPY_VARIABLES = ("NPY_ENABLE_CPU_FEATURES", "NPY_DISABLE_CPU_FEATURES")

def _cpuinfo(field: str) -> str | None:
    """The value of the first ``field`` line of Linux's ``/proc/cpuinfo`` (None elsewhere or without it)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_vendor() -> str:
    """``GenuineIntel``, ``AuthenticAMD`` or another vendor id (Linux ``/proc/cpuinfo``; ``unknown`` elsewhere)."""
    return _cpuinfo("vendor_id") or "unknown"


MKL_MODE_BY_VENDOR = {"GenuineIntel": "AVX2,STRICT"}
"""``MKL_CBWR`` where it differs from ``AVX2`` (the mode on AMD and elsewhere): see the module's docstring."""

PINNED_ENV["MKL_CBWR"] = MKL_MODE_BY_VENDOR.get(cpu_vendor(), "AVX2")
PINNED_ENV.update(_numpy_pin())  # PINNED_ENV: set, overriding the environment, before torch and numpy load
THREAD_DEFAULTS: dict[str, str] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Set only where the environment does not say otherwise."""

_STATE: dict[str, Any] = {"pinned": False, "reason": "not applied"}


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    return set((_cpuinfo("flags") or "").split())


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def pin() -> dict[str, Any]:
    """Apply the pin if neither torch nor numpy is loaded yet and the machine has AVX2; returns what was done."""
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
    elif "numpy" in sys.modules:
        _STATE.update(pinned=False, reason="numpy was imported before sao_env")
    else:
        for key in NUMPY_VARIABLES:  # numpy refuses both at once; the pin's own one is set next
            os.environ.pop(key, None)
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
    return {"pinned": _STATE["pinned"], "reason": _STATE["reason"], "cpu": cpu_model(), "vendor": cpu_vendor(),
            "machine": platform.machine(), "dispatch": torch.backends.cpu.get_cpu_capability(), "blas": blas,
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
            "numpy_simd": numpy_simd()}


def numpy_simd() -> list[str]:
    """numpy's SIMD dispatch targets active in this process (beyond its compiled baseline)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        except ImportError:
            return []
    return [target for target in __cpu_dispatch__ if __cpu_features__.get(target)]


BITS_FIELDS = ("pinned", "vendor", "machine", "dispatch", "blas", "mkl_cbwr", "onednn_max_isa", "numpy_simd")
"""The fields of ``numerics_record`` that decide a pinned run's bits (the CPU's model too where unpinned)."""


def same_bits(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two processes' numerics records give one run the same bits: pinned on one vendor with the same
    levels (any model of that vendor, the pin's claim), or unpinned on the same CPU model with the same levels."""
    fields = BITS_FIELDS if a.get("pinned") and b.get("pinned") else (*BITS_FIELDS, "cpu")
    return all(a.get(k) == b.get(k) for k in fields)


def describe_numerics(record: dict[str, Any]) -> str:
    """``AMD EPYC (AuthenticAMD, pinned, MKL_CBWR=AVX2)``: a numerics record in a few words."""
    pinned = "pinned" if record.get("pinned") else f"unpinned, dispatch {record.get('dispatch')}"
    return f"{record.get('cpu')} ({record.get('vendor')}, {pinned}, MKL_CBWR={record.get('mkl_cbwr')})"


def resumed_segments(earlier: list[dict[str, Any]] | None, now: dict[str, Any], at_sim_s: float) -> list[dict[str, Any]]:
    """The numerics a run was made under, segment by segment: ``earlier`` (a checkpoint's list; None for a run
    started here) with this process's record appended from ``at_sim_s`` when its bits differ from the last one's.
    Each entry is a numerics record with ``from_sim_s``, the simulated time from which it made the run."""
    if not earlier:
        return [{"from_sim_s": 0.0, **now}]
    if same_bits(earlier[-1], now):
        return list(earlier)
    return [*earlier, {"from_sim_s": float(at_sim_s), **now}]
