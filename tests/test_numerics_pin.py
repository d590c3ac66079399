"""Pinned numerics (sao_env/numerics.py): a run's bits do not depend on the dispatch level the
machine offers or the environment asks for.

Each case is the same short SAO run in a fresh process. The pinned run must give the same logs
(a) when the caller's environment asks for another ATen level and MKL mode (the pin overrides
them), and (b) as an unpinned run on an emulated AVX2-only machine (every library capped at AVX2
by hand). A control shows the test can fail: on a machine that offers AVX-512, the unpinned
native run differs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHRINK_TASKS
from sao_env.numerics import MKL_MODE_BY_VENDOR, PINNED_ENV, cpu_flags, cpu_vendor, pin

pytestmark = pytest.mark.slow

CUT = [*SHRINK_TASKS, "env.phases.0.duration_h=0.008", "env.phases.1.duration_h=0.008",
       "env.phases.2.duration_h=0.008", "env.eval.interval_h=0.008", "env.eval.prompts_per_phase=8",
       "env.rollout_slots=8", "agent.hparams.critic_warmup_updates=1"]


GOLDEN = {  # SAO's critic at 5x and seed-keyed evaluation; the critic-fit metrics (critic/explained_variance_prefit
    # and kin) added to metrics.jsonl, evals and episodes unchanged; the earlier set also held on an AVX-512 AMD EPYC
    "AuthenticAMD": {
        "metrics.jsonl": "fdc7018db17c421f223ddc8641a72fad6c4fdaf41b06025989656d032207d69a",
        "evals.jsonl": "627c2947bad5cf01b1da50f95b8f260e3870e910c9c15e86ea22ead1f5bc5bc2",
        "episodes.jsonl": "6d901f9e3107634dbccb0be4b589f6f263b3117d30db30ce34f172f7f5e88011",
    },
    "GenuineIntel": {  # MKL_CBWR=AVX2,STRICT (sao_env/numerics.py)
        "metrics.jsonl": "845f3c4149c8cd332f0f9c78a4c2c40bb5d0cffcb9b116c45ed0a45bd135c974",
        "evals.jsonl": "f8a8025729241e184f683fae2521e665c89306b52163a299b5fd50074e6f55c9",
        "episodes.jsonl": "9210ff325d01c80e86fb0e29b40d9acdaaad7ef3183361c00e9e6699d63ed72d",
    },
}
"""sha256 of the pinned run's logs per CPU vendor, torch 2.13.0+cpu: AMD's recorded on a 2-core AMD EPYC (family
25, AVX2 without AVX-512) and held on an AVX-512 EPYC; Intel's recorded on a 2-core Intel Xeon (Sapphire Rapids,
AVX-512 and AMX) and held on a 2-core Intel Xeon of family 6, model 207 (Emerald Rapids, AVX-512, no AMX shown to
the guest), 2026-12-07. The two vendors' MKL kernels give different bits (sao_env/numerics.py). Every machine that runs
this suite checks its vendor's: the same bytes on another x86-64 machine of that vendor with AVX2 is the claim of
the pin. A change that means to change runs' numbers (an algorithm, a sampler, a scenario) records them anew on
both vendors' machines, and its commit says on which."""


def _run(tmp_path: Path, name: str, env: dict[str, str]) -> dict[str, str]:
    out = tmp_path / name
    full = {k: v for k, v in os.environ.items() if k not in PINNED_ENV and k != "SAO_ENV_NUMERICS"}
    full.update(env)
    done = subprocess.run([sys.executable, "-m", "sao_env.cli", "run", "--env", "style-drift", "--agent", "sao",
                           "--seed", "0", "--out", str(out), *CUT], env=full, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return {log: hashlib.sha256((out / log).read_bytes()).hexdigest()
            for log in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl")}


@pytest.mark.skipif("avx2" not in cpu_flags(), reason="the pin needs an x86-64 CPU with AVX2")
def test_a_pinned_run_has_the_same_bytes_whatever_the_levels_asked_or_offered(tmp_path):
    pinned = _run(tmp_path, "pinned", {})
    asked_otherwise = _run(tmp_path, "asked", {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"})
    avx2_machine = _run(tmp_path, "avx2", {"SAO_ENV_NUMERICS": "native", **PINNED_ENV})
    assert asked_otherwise == pinned
    assert avx2_machine == pinned
    assert cpu_vendor() in GOLDEN, f"no bits recorded for {cpu_vendor()} CPUs: record this run's in GOLDEN"
    assert pinned == GOLDEN[cpu_vendor()], "the pinned run's bytes differ from those recorded on another machine (GOLDEN)"
    if "avx512f" in cpu_flags():  # the control: without the pin this machine's own kernels change the bits
        assert _run(tmp_path, "native", {"SAO_ENV_NUMERICS": "native"})["metrics.jsonl"] != pinned["metrics.jsonl"]


NUMPY_PROBE = """
import sao_env, numpy, json
from sao_env.numerics import numerics_record, numpy_simd
from numpy._core._multiarray_umath import __cpu_dispatch__
print(json.dumps({"active": numpy_simd(), "dispatch": list(__cpu_dispatch__), "record": numerics_record()["numpy_simd"]}))
"""


def test_the_pin_caps_numpy_at_avx2_and_records_it():
    """numpy's own SIMD dispatch changed a pinned run's bits on an AVX-512 machine (its X86_V4
    kernels): after the pin, no target past X86_V3 is active, whatever the caller's environment
    asked, and the run's provenance names the active targets."""
    pytest.importorskip("numpy", minversion="2.4")
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV and k != "SAO_ENV_NUMERICS"}
    env["NPY_DISABLE_CPU_FEATURES"] = "X86_V3"  # asked otherwise: numpy refuses both variables, the pin keeps its own
    done = subprocess.run([sys.executable, "-c", NUMPY_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    seen = json.loads(done.stdout)
    expected = ["X86_V3"] if "avx2" in cpu_flags() and "fma" in cpu_flags() else []
    assert seen["active"] == seen["record"] == expected
    assert "X86_V4" in seen["dispatch"]  # the build has the AVX-512 kernels that the pin turns off
    native = subprocess.run([sys.executable, "-c", NUMPY_PROBE], env={**env, "SAO_ENV_NUMERICS": "native"},
                            capture_output=True, text=True, timeout=120)
    if "avx512f" in cpu_flags() and "avx512bw" in cpu_flags():  # the control: unpinned, this machine dispatches past AVX2
        assert "X86_V4" in json.loads(native.stdout)["active"]


def test_the_pin_refuses_after_torch_and_records_why(monkeypatch):
    import sao_env.numerics as numerics

    monkeypatch.setattr(numerics, "_STATE", {"pinned": False, "reason": "not applied"})
    monkeypatch.setenv("SAO_ENV_NUMERICS", "pinned")
    import torch  # noqa: F401  (already loaded in the test process)

    state = pin()
    assert state == {"pinned": False, "reason": "torch was imported before sao_env"} or \
        state["reason"] in ("the CPU has no AVX2",) or state["reason"].startswith("not x86-64")
    monkeypatch.setattr(numerics, "_STATE", {"pinned": False, "reason": "not applied"})
    monkeypatch.setenv("SAO_ENV_NUMERICS", "native")
    assert pin() == {"pinned": False, "reason": "SAO_ENV_NUMERICS=native"}


def test_the_mkl_mode_follows_the_vendor():
    """Intel's MKL AVX2 branch gave a forward pass with gradients other bits than the same pass without
    (tests/test_spine_agents.py's critic fit); its strict mode does not. AMD keeps the mode its bits were
    recorded with."""
    assert MKL_MODE_BY_VENDOR == {"GenuineIntel": "AVX2,STRICT"}
    assert PINNED_ENV["MKL_CBWR"] == ("AVX2,STRICT" if cpu_vendor() == "GenuineIntel" else "AVX2")
    if pin()["pinned"]:
        assert os.environ["MKL_CBWR"] == PINNED_ENV["MKL_CBWR"]
