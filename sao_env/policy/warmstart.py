"""Supervised warm start on a scenario's own generators, cached on disk by config hash.

The starting policy of the CPU ladder: it learns the task format and solves many problems, and,
because demonstrations pick a listed style uniformly, it starts with no preference among the
candidate styles, so what RL later learns about the hidden rewarded style is visible.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from sao_env.envs.base import render_prompt
from sao_env.experiment.files import flocked as _locked
from sao_env.forking import fork_is_safe
from sao_env.policy.chat import TextFormat, conversation_format
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer, load_tokenizer
from sao_env.policy.placement import place
from sao_env.scenario import Scenario, WarmStartSpec
from sao_env.types import Turn


HEARTBEAT_S = 30.0
"""Wall-clock seconds between two plain progress lines of long work when stderr is not a terminal."""


class Heartbeat:
    """Long work that reports itself when nobody watches a terminal: with ``stream`` (default stderr) not a
    terminal, ``tick(done)`` prints ``sao-env: WHAT: DONE/TOTAL UNIT (P%), DETAIL, S s elapsed`` at most every
    ``every_s`` seconds of wall clock (a log file, nohup, CI); on a terminal it prints nothing (a live bar shows)."""

    def __init__(self, what: str, total: int, *, unit: str = "steps", every_s: float | None = None, stream=None):
        self.what, self.total, self.unit = what, total, unit
        self.every_s = HEARTBEAT_S if every_s is None else every_s
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = not (isatty is not None and isatty())
        self.start = self.last = time.monotonic()

    def line(self, text: str) -> None:
        """Print ``sao-env: WHAT: TEXT`` now (when enabled)."""
        if self.enabled:
            print(f"sao-env: {self.what}: {text}", file=self.stream, flush=True)

    def tick(self, done: int, detail: str = "") -> None:
        """``done`` of ``total`` finished; a line if ``every_s`` passed since the last one."""
        now = time.monotonic()
        if self.enabled and now - self.last >= self.every_s:
            self.last = now
            share = f" ({100 * done / self.total:.0f}%)" if self.total else ""
            self.line(f"{done}/{self.total} {self.unit}{share}{', ' + detail if detail else ''}, "
                      f"{now - self.start:.0f} s elapsed")


DEMONSTRATION_FORMAT = 2
"""Part of the warm-start cache key: bump it when a source's demonstrations change, so that cached
warm starts trained on the old ones are not reused."""


def cache_root() -> Path:
    """``$SAO_ENV_CACHE``, else ``$XDG_CACHE_HOME/sao-env``, else ``~/.cache/sao-env``."""
    if os.environ.get("SAO_ENV_CACHE"):
        return Path(os.environ["SAO_ENV_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sao-env"


def warm_start_key(model: ModelSpec, scenario: Scenario, spec: WarmStartSpec) -> str:
    """What the warm start depends on: the model, the resolved parameters (defaults included) and
    mixture weight of every source it draws demonstrations from (every phase's, only those of
    ``warm_start.phases`` when it lists some, or ``warm_start.sources``: phases it does not draw from
    can change without retraining), the warm-start settings and the demonstration format. A spec
    without ``sources`` keeps the key it had before that field existed."""
    phases = [[{"name": source.name, "weight": spec_source.weight, "params": source.params.model_dump(mode="json")}
               for source, spec_source in zip(sources, phase.sources)]
              for sources, phase in zip(scenario.sources, scenario.spec.phases)]
    if spec.phases is not None:
        phases = [phases[i] for i in spec.phases]
    if spec.sources is not None:
        phases = [[{"name": source.name, "weight": spec_source.weight, "params": source.params.model_dump(mode="json")}
                   for source, spec_source in zip(scenario.warm_sources, spec.sources)]]
    settings = spec.model_dump()
    del settings["sources"]  # as resolved above (absent before the field existed: those keys stay)
    payload = {
        "model": {k: v for k, v in model.model_dump().items() if k not in ModelSpec.placement_keys},
        "phases": phases,
        "warm_start": settings,
        "format": DEMONSTRATION_FORMAT,
    }
    if scenario.spec.chat is not None:  # the demonstrations' layout (absent for plain text: those keys stay)
        payload["chat"] = scenario.spec.chat.model_dump()
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def warm_start_path(model_spec: ModelSpec, scenario: Scenario) -> Path | None:
    """Where the scenario's warm start of this model is cached (trained or not), or None where the
    policy needs none (a pretrained model unless ``warm_start.pretrained``, or ``warm_start.steps: 0``)."""
    spec = scenario.spec.warm_start
    if not (model_spec.is_tiny or spec.pretrained) or spec.steps == 0:
        return None
    return cache_root() / "warmstart" / warm_start_key(model_spec, scenario, spec)


def is_cached(path: Path) -> bool:
    """True once a warm start was written whole at ``path`` (its folder appears by one rename)."""
    return (path / "config.json").is_file()


def load_warm_started(
    model_spec: ModelSpec, scenario: Scenario, *, show_progress: bool = True, forward_threads: int | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, Path | None]:
    """The warm-started tiny policy (trained once, then read from the cache), or a hub model as is;
    ``forward_threads`` as in ``supervised_warm_start`` where it has to be trained. The policy is returned on
    ``model_spec.device`` with its precision recorded (``sao_env.policy.placement``); a warm start is always
    trained and cached on the CPU in float32, so its cache serves every placement."""
    policy, tokenizer, path = _load_warm_started(model_spec, scenario, show_progress=show_progress,
                                                 forward_threads=forward_threads)
    return place(policy, model_spec.device, model_spec.precision), tokenizer, path


def _load_warm_started(model_spec: ModelSpec, scenario: Scenario, *, show_progress: bool,
                       forward_threads: int | None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, Path | None]:
    spec = scenario.spec.warm_start
    path = warm_start_path(model_spec, scenario)
    if path is None:
        tokenizer = build_tokenizer(model_spec)
        return build_policy(model_spec, tokenizer, seed=spec.seed), tokenizer, None
    if is_cached(path):
        return AutoModelForCausalLM.from_pretrained(path), load_tokenizer(path), path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_name(path.name + ".lock")):  # one process trains, the others wait and read
        if is_cached(path):
            return AutoModelForCausalLM.from_pretrained(path), load_tokenizer(path), path
        tokenizer = build_tokenizer(model_spec)
        model = build_policy(model_spec, tokenizer, seed=spec.seed)
        supervised_warm_start(model, tokenizer, scenario, spec, show_progress=show_progress,
                              forward_threads=forward_threads)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if path.exists():  # left by an interrupted writer: replaced whole
            shutil.rmtree(path)
        tmp.replace(path)
    return model, tokenizer, path


def supervised_warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    scenario: Scenario,
    spec: WarmStartSpec,
    *,
    show_progress: bool = True,
    forward_threads: int | None = None,
) -> list[float]:
    """Train on (prompt, demonstration) pairs, loss on the response and EOS only; returns the loss curve.

    ``forward_threads``: torch threads for the forward passes (default: the caller's count, which the
    backward and the optimizer always keep). The forward's operations (matrix products, attention,
    norms, softmax) give the same bits on any thread count (measured for the tiny models, and checked
    by tests/test_warmstart_parallel.py), so spare cores shorten a step without changing the result; a
    backward's weight gradients sum over batch x positions and do not (their bits follow the thread
    count), so it stays on the caller's. With spare threads the batches are made in this process
    (a helper making them ahead would compete for the same core: slower, measured).
    """
    threads = torch.get_num_threads()
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=spec.lr, total_steps=spec.steps, pct_start=0.1)
    losses = []
    model.train()
    heartbeat = Heartbeat(f"warm start of {scenario.spec.name} (supervised)", spec.steps)
    say = lambda text: print(f"sao-env: {heartbeat.what}: {text}", file=heartbeat.stream, flush=True)  # noqa: E731
    say(f"training {spec.steps} steps of {spec.batch_size} demonstrations once (then cached); it is not "
        f"checkpointed: an interruption loses it and the next start trains it again"
        + (f"; a line every {heartbeat.every_s:.0f} s" if heartbeat.enabled else ""))
    started = time.monotonic()
    try:
        with Progress(disable=not show_progress, transient=True) as progress:
            _train(model, tokenizer, scenario, spec, optimizer, schedule, losses, progress, heartbeat, say,
                   started, forward_threads or threads, threads)
    except KeyboardInterrupt as err:  # the command's line says where it stopped and how to start again
        err.sao_warm_start = (len(losses), spec.steps)
        raise
    model.eval()
    return losses


ESTIMATE_AFTER_STEPS = 3
"""The warm start says how long it will take once this many steps are measured (the first includes set-up)."""


def _train(model, tokenizer, scenario, spec, optimizer, schedule, losses, progress, heartbeat, say, started,
           forward, threads) -> None:
    """``supervised_warm_start``'s loop."""
    bar = progress.add_task("warm start (supervised)", total=spec.steps)
    helper = forward == 1 and fork_is_safe()  # with more threads the helper would take the spare core
    for tokens, labels, attention in demonstration_batches(tokenizer, scenario, spec, helper=helper):
        torch.set_num_threads(forward)
        try:
            loss = model(input_ids=tokens, attention_mask=attention, labels=labels).loss
        finally:
            torch.set_num_threads(threads)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        progress.update(bar, advance=1, description=f"warm start (supervised) loss {loss.item():.3f}")
        heartbeat.tick(len(losses), f"loss {losses[-1]:.3f}")
        if len(losses) == min(ESTIMATE_AFTER_STEPS, spec.steps - 1):
            per_step = (time.monotonic() - started) / len(losses)
            say(f"about {per_step * spec.steps:.0f} s in all ({per_step:.2f} s a step over the first "
                f"{len(losses)}; {per_step * (spec.steps - len(losses)):.0f} s to go)")


class _DemonstrationBatches(torch.utils.data.IterableDataset):
    """The warm start's ``spec.steps`` batches in order, all drawn from one generator seeded with ``spec.seed``."""

    def __init__(self, tokenizer, scenario: Scenario, spec: WarmStartSpec):
        self.tokenizer, self.scenario, self.spec = tokenizer, scenario, spec

    def __iter__(self):
        rng = np.random.default_rng(self.spec.seed)
        for step in range(self.spec.steps):
            yield _demonstration_batch(self.tokenizer, self.scenario, rng, self.spec.batch_size, step)


def demonstration_batches(tokenizer, scenario: Scenario, spec: WarmStartSpec, *, helper: bool):
    """The warm start's (tokens, labels) batches, the same whoever makes them.

    With ``helper`` (only where ``fork_is_safe``), a forked helper process makes them a few steps
    ahead, so that the trainer's core spends its time on the model (sampling and tokenising is about
    7% of a style-drift warm-start step, measured); otherwise this process makes each when needed.
    """
    batches = _DemonstrationBatches(tokenizer, scenario, spec)
    if not helper:
        return iter(batches)
    return iter(torch.utils.data.DataLoader(batches, batch_size=None, num_workers=1, prefetch_factor=8,
                                            multiprocessing_context="fork"))


def _demonstration_batch(tokenizer, scenario: Scenario, rng: np.random.Generator, batch_size: int, step: int):
    rows, label_masks = [], []
    layout = conversation_format(tokenizer, scenario.spec.chat)
    for i in range(batch_size):
        task, demonstration = scenario.demonstration(rng, index=step * batch_size + i)
        row, trained = demonstration_tokens(tokenizer, render_prompt(task), demonstration, layout=layout)
        rows.append(row)
        label_masks.append(trained)
    width = max(len(r) for r in rows)
    tokens = torch.full((batch_size, width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)
    attention = torch.zeros((batch_size, width), dtype=torch.long)
    for i, (row, trained) in enumerate(zip(rows, label_masks)):
        tokens[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.where(torch.tensor(trained), torch.tensor(row), torch.tensor(-100))
        attention[i, : len(row)] = 1  # by length: an instruct model's pad token is its EOS, which rows hold
    return tokens, labels, attention


def demonstration_tokens(tokenizer, prompt: str, demonstration: str | list[Turn],
                         layout: TextFormat | None = None) -> tuple[list[int], list[bool]]:
    """The conversation's tokens as the rollout loop builds them, and which ones are trained on.

    Each action is followed by EOS (how the policy ends a turn) and both are trained on; the
    prompt and the observations between actions are context only, laid out by ``layout`` (the
    scenario's ``sao_env.policy.chat`` format; None: plain text). The last turn's observation is
    dropped: the episode ends there.
    """
    layout = layout or TextFormat(tokenizer)
    turns = [Turn(demonstration)] if isinstance(demonstration, str) else list(demonstration)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"] if text else []  # noqa: E731
    row = list(layout.prompt_ids(prompt))
    trained = [False] * len(row)
    for k, turn in enumerate(turns):
        action = encode(turn.action) + [tokenizer.eos_token_id]
        row += action
        trained += [True] * len(action)
        if k < len(turns) - 1:
            observation = list(layout.observation_ids(turn.observation))
            row += observation
            trained += [False] * len(observation)
    return row, trained
