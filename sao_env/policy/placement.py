"""Where a model lives and in which precision its passes run: ``agent.model.device`` and ``agent.model.precision``.

Devices: ``cpu`` (the default: the pinned CPU ladder), ``auto`` (the first CUDA GPU if there is one, else the
CPU), or a torch device name (``cuda``, ``cuda:1``, ``mps``). The policy is placed once, when it is built or
loaded (``sao_env.policy.warmstart.load_warm_started``); everything made from it afterwards (the critic's
backbone, the sampler's deployed copy, the learner's batches) follows its device.

Precisions (``PRECISIONS``):
    float32        every pass in float32 (the default; the tiny recipes' pinned bytes).
    bf16_autocast  float32 master weights and optimizer state; the forward passes of the learner, the critic,
                   the sampler and the evaluation run under ``torch.autocast(dtype=bfloat16)`` (matrix products
                   and attention in bfloat16, norms, softmax and the log-probabilities in float32), and the
                   sampler's key/value cache is bfloat16. The rollout and the learner compute the same way, so
                   their log-probabilities differ by kernel rounding only, not by a weight cast.
A model loaded in bfloat16 (``agent.model.dtype: bfloat16``) with ``precision: float32`` trains pure bf16
weights (no master copy); that is the existing ``dtype`` key, kept for inference-only uses.

The precision is kept on the module (``set_precision``): it travels with deep copies (the deployed sampler
copy) and pickles (resume checkpoints), and ``autocast(model)`` reads it where a pass is made.
"""

from __future__ import annotations

import contextlib
import re

import torch

PRECISIONS = ("float32", "bf16_autocast")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps|xpu(:\d+)?)$")
_ATTRIBUTE = "_sao_precision"


def resolve_device(name: str) -> torch.device:
    """``auto`` -> the first CUDA GPU if there is one, else the CPU; any other name as torch reads it.

    A GPU asked for by name that this machine lacks is a ``UserError`` (one line), not a CUDA traceback."""
    from sao_env.errors import UserError

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda:0")
        import warnings

        warnings.warn("agent.model.device=auto: torch sees no CUDA GPU here; the model runs on the CPU "
                      "(the run's provenance records the device)", UserWarning, stacklevel=2)
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"agent.model.device={name}: torch sees no CUDA device here "
                            f"(use device=auto to fall back to the CPU)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"agent.model.device={name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"agent.model.device={name}: torch sees no MPS device here")
    return device


def set_precision(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """Record ``precision`` on ``model`` (``autocast`` reads it); returns the model."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if precision == "float32":
        model.__dict__.pop(_ATTRIBUTE, None)
    else:
        model.__dict__[_ATTRIBUTE] = precision
    return model


def precision_of(model: torch.nn.Module) -> str:
    return model.__dict__.get(_ATTRIBUTE, "float32")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (the CPU for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def autocast(model: torch.nn.Module):
    """The context a pass of ``model`` runs in: bf16 autocast on its device for ``bf16_autocast``, else nothing
    (the float32 path is untouched: no autocast context is entered at all)."""
    if precision_of(model) != "bf16_autocast":
        return contextlib.nullcontext()
    return torch.autocast(model_device(model).type, dtype=torch.bfloat16)


def place(model: torch.nn.Module, device: str = "cpu", precision: str = "float32") -> torch.nn.Module:
    """Move ``model`` to ``device`` (``resolve_device``) and record its precision; a CPU float32 placement
    leaves the model as it is (no copy, no cast)."""
    target = resolve_device(device)
    if target != model_device(model):
        model = model.to(target)
    return set_precision(model, precision)
