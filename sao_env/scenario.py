"""Scenarios: drifting task streams over simulated time (envs/*.yaml).

A scenario is a sequence of phases, each a weighted mixture of task sources. A phase may begin
abruptly or blend in from the previous phase over ``transition_h`` hours (gradual drift); listing
a phase twice makes the drift cyclic. Each phase has a held-out evaluation set drawn from its own
seed stream, identical for every agent and seed, so that adaptation curves are comparable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_serializer, model_validator

from sao_env.config_dump import OmitDefaults
from sao_env.tasks import TaskSource, build_source
from sao_env.types import Task, Turn

HOUR = 3600.0


MAX_EVAL_POINTS = 100_000
"""The most held-out evaluations a scenario may schedule (its duration over ``eval.interval_h``, plus
the final one): beyond it the schedule alone would not fit in memory, and the run would never end."""
MAX_SIMULATED_HOURS = 1_000.0
"""The longest scenario (its phases together), in simulated hours: 1,500 times style-drift's 0.65 h, weeks of
CPU for one run; a longer one would not end."""
MAX_NEW_TOKENS = 131_072
"""The largest generation limit per turn (and 8x that, the largest context): buffers sized by it must fit in
memory (100,000,000 asked for 307 GB)."""


class _Strict(BaseModel):
    """Unknown keys, infinite and NaN numbers are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SourceSpec(_Strict):
    name: str
    """Task source, see ``sao_env.tasks.TASK_SOURCES``."""
    weight: float = Field(1.0, ge=0)
    """Relative weight in the phase's mixture; 0 keeps the source listed but never drawn (a mixture knob
    whose levels draw the same random numbers), as long as one source of the phase has a positive weight."""
    params: dict[str, Any] = {}
    """Parameters of the source (validated by the source's own model)."""


class PhaseSpec(_Strict):
    name: str
    """Label used in metrics (``eval/<name>/accuracy``) and in task ids."""
    duration_h: float = Field(gt=0)
    """Length of the phase in simulated hours."""
    transition_h: float = Field(0.0, ge=0)
    """Gradual drift: the previous phase's mixture fades out linearly over this many hours (0 = abrupt)."""
    sources: list[SourceSpec] = Field(min_length=1)
    """The phase's task mixture."""

    @model_validator(mode="after")
    def _some_weight(self) -> "PhaseSpec":
        if not any(s.weight > 0 for s in self.sources):
            raise ValueError(f"phase {self.name!r}: every source has weight 0; give one a positive weight")
        return self


class LatencySpec(_Strict):
    """Simulated costs. Episode time = prefill + decode + environment; an update costs base + per token.

    A turn's environment time is ``task factor x within-task draw (+ env_s_per_token x its action
    tokens)``: the task factor (median 1, log-normal with spread ``task_sigma``) is shared by every
    rollout of a task, the within-task draw is the episode's own (family ``family``, median
    ``env_median_s`` or the tool's). With the defaults (no task factor, log-normal, no coupling)
    this is the original model: a turn's draw depends on (episode seed, turn) alone. docs/runtime.md.
    """

    prefill_s_per_token: float = Field(0.0005, ge=0)
    """Simulated seconds per prompt token."""
    decode_s_per_token: float = Field(0.05, ge=0)
    """Simulated seconds per generated token."""
    env_median_s: float = Field(10.0, ge=0)
    """Median of the environment latency per turn (tool calls, sandboxes, graders)."""
    env_sigma: float = Field(1.0, ge=0)
    """Log-normal shape of the within-task environment latency; 1.0 puts the p99 at about 10x the median."""
    tool_median_s: dict[str, float] = {}
    """Median latency per tool call by tool name in multi-turn envs (e.g. ``run_tests: 30``); a tool
    not listed, and a single-turn env's grading, use ``env_median_s``."""
    update_base_s: float = Field(1.0, ge=0)
    """Simulated seconds of fixed cost per learner update (weight sync included)."""
    update_s_per_token: float = Field(0.002, ge=0)
    """Simulated seconds per trained token (forward + backward, each model trained)."""
    task_sigma: float = Field(0.0, ge=0)
    """Log-normal spread of the per-task factor (median 1) that scales every turn of every rollout of a
    task, drawn from (run seed, task id); 0 = no task effect, so group members are independent."""
    family: Literal["lognormal", "pareto"] = "lognormal"
    """Tail family of the within-task draw: log-normal (shape ``env_sigma``) or Pareto (shape
    ``pareto_alpha``), each with the same median."""
    pareto_alpha: float = Field(1.5, gt=0)
    """Pareto shape alpha (``family: pareto``): quantile p is ``median x (2(1-p))^(-1/alpha)``, so the p99
    is 50^(1/alpha) x the median (alpha=1: 50x); alpha <= 1 has no finite mean."""
    env_s_per_token: float = Field(0.0, ge=0)
    """Environment seconds per generated token of the turn's action (long answers take long to run and
    grade); 0 = the environment's time ignores length."""
    fail_to_turn_limit: bool = False
    """A multi-turn episode that fails (reward below ``fail_below``) before the turn limit is charged the
    environment time of its remaining turns, as an agent that keeps trying until the limit would be."""
    fail_below: float = Field(0.5, ge=0, le=1)
    """Reward below which an episode counts as failed (``fail_to_turn_limit``)."""

    def turn_s(self, env_seed: int, turn: int, tool: str | None, factor: float = 1.0) -> float:
        """Simulated seconds of turn ``turn`` (1-based) of the episode seeded ``env_seed``: ``factor`` (the
        task's) times the within-task draw of median ``tool_median_s[tool]`` (else ``env_median_s``),
        from (seed, turn) alone (``turn_normal``)."""
        median = self.tool_median_s.get(tool or "", self.env_median_s)
        return factor * self.from_normal(median, turn_normal(env_seed, turn))

    def from_normal(self, median: float, z: float) -> float:
        """The within-task draw of median ``median`` whose standard normal is ``z``: ``median x exp(env_sigma z)``
        (log-normal) or the Pareto quantile at ``Phi(z)``, ``median x (2(1 - Phi(z)))^(-1/alpha)``. Both
        increase with ``z``, so one episode is slow in either family."""
        if self.family == "lognormal":
            return float(median * np.exp(self.env_sigma * z))
        tail = 0.5 * math.erfc(z / math.sqrt(2.0))  # 1 - Phi(z), exact far into the upper tail
        return float(median * (2.0 * tail) ** (-1.0 / self.pareto_alpha))

    def task_factor(self, seed: int, task_id: str) -> float:
        """The task's latency factor: ``exp(task_sigma x z)``, z standard normal from (run seed, task id);
        the same for every rollout of the task, 1.0 when ``task_sigma`` is 0."""
        if self.task_sigma == 0:
            return 1.0
        key = int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "little")
        z = np.random.default_rng([int(seed), key, 0x7A5C]).standard_normal()
        return float(np.exp(self.task_sigma * z))

    def min_first_turn_s(self, env_seed: int, task: Task | None = None) -> float:
        """A lower bound of the first turn's latency whatever tool it calls (lets the runtime defer work).
        It holds for ``task``'s factor; without the task, a task factor makes the bound 0."""
        median = min([self.env_median_s, *self.tool_median_s.values()])
        factor = 1.0 if self.task_sigma == 0 else (0.0 if task is None else latency_factor(task))
        return factor * self.from_normal(median, turn_normal(env_seed, 1))


def latency_factor(task: Task) -> float:
    """The latency factor ``Scenario.next_task`` stamped on the task (``metadata["latency_factor"]``), else 1."""
    return float(task.metadata.get("latency_factor", 1.0))


def turn_normal(env_seed: int, turn: int) -> float:
    """The standard normal behind a turn's latency, from its own stream (seed, turn)."""
    return float(np.random.default_rng([int(env_seed), int(turn), 0x1A7E]).standard_normal())


EVAL_VERSION = 3
"""The held-out evaluation's version where a scenario names none (``eval.version``): recorded in every summary
(``eval_version``); what each version does is in sao_env/evaluation/heldout.py."""


class EvalSpec(_Strict, OmitDefaults):
    omit_at_default: ClassVar[tuple[str, ...]] = ("version",)

    interval_h: float = Field(0.05, gt=0)
    """Held-out evaluation every this many simulated hours (and at the end)."""
    prompts_per_phase: int = Field(64, gt=0)
    """Size of each phase's held-out set."""
    seed: int = Field(12345, ge=0)
    """Seed of the held-out sets (fixed by it alone) and of evaluation sampling (combined with the run's seed:
    shared by every agent at one seed, independent across seeds)."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature at evaluation (1.0 measures the policy's actual style shares)."""
    recovery_threshold: float = Field(0.8, gt=0, le=1)
    """Recovery after a drift = first evaluation where the new phase's accuracy reaches this."""
    version: Literal[2, 3] | None = None
    """Evaluation version (none: ``EVAL_VERSION``): 3 = one held-out set per phase for every seed; 2 = a set per
    run seed, to make again a run recorded under version 2 (``sao-env verify`` sets it for such rows)."""


class WarmStartSpec(_Strict, OmitDefaults):
    """Supervised warm start on the scenario's own generators (demonstrations from its sources)."""

    omit_at_default: ClassVar[tuple[str, ...]] = ("pretrained",)

    steps: int = Field(600, ge=0)
    batch_size: int = Field(64, gt=0)
    lr: float = Field(3e-3, gt=0)
    seed: int = Field(0, ge=0)
    phases: list[int] | None = None
    """Indices of the phases whose sources give demonstrations (None: every phase, uniformly).
    ``[0]`` starts from a policy that knows only the first phase's world, e.g. last week's code."""
    sources: list[SourceSpec] | None = None
    """Demonstration sources of their own, in place of the phases' (exclusive with ``phases``): a
    policy trained on a world that no phase serves, e.g. the code as it was before the run starts.
    Drawn by weight; with equal weights as ``phases=None`` draws one-source phases, so listing the
    phases' sources here gives the same demonstrations."""
    pretrained: bool = False
    """Warm-start a pretrained model (a hub or packaged one) too; by default only the tiny models, built at
    random, are warm-started and a pretrained model starts as it is. A chat scenario's short format lesson."""


class ChatSpec(_Strict):
    """Prompts and observations through the policy's chat template (``sao_env.policy.chat.ChatFormat``): the
    scenarios written for an instruct model. The tasks, rewards, graders and schedule are the scenario's own."""

    system: str | None = None
    """The system message, the same in every episode (None: the template's default)."""
    observation_role: str = "tool"
    """The role an environment's observation (a tool's output) is sent as."""


class ScenarioSpec(_Strict):
    name: str
    description: str = ""
    phases: list[PhaseSpec] = Field(min_length=1)
    latency: LatencySpec = LatencySpec()
    eval: EvalSpec = EvalSpec()
    warm_start: WarmStartSpec = WarmStartSpec()
    rollout_slots: int = Field(8, gt=0)
    """Concurrent rollouts (the inference hardware); the same for every agent on the scenario."""
    max_new_tokens: int = Field(24, gt=0, le=MAX_NEW_TOKENS)
    """Generation limit per turn."""
    max_turns: int = Field(1, gt=0)
    """Turn limit of multi-turn episodes (the episode is then graded as it stands)."""
    max_context_tokens: int = Field(4096, gt=0, le=8 * MAX_NEW_TOKENS)
    """An episode whose conversation outgrows this ends with reward 0 (reason ``context-limit``)."""
    domain: Literal["reasoning", "coding"] = "reasoning"
    """Selects the default DIS band: 0.3/5.0 for reasoning, 0.8/3.0 for coding (SAO paper)."""
    dis_eps_low: float | None = None
    """Override of the DIS band's lower width for this scenario (r must exceed 1 - eps_low)."""
    dis_eps_high: float | None = None
    """Override of the DIS band's upper width for this scenario (r must stay below 1 + eps_high)."""
    sandbox: Literal["bubblewrap", "docker"] = "bubblewrap"
    """Where the policy's code runs (tool calls, test runs, grading; docs/sandbox.md): ``bubblewrap`` on this
    machine, or ``docker``, a container of the sandbox image per run. Left out of the dumped configuration
    at its default, so that the configuration hashes of runs made before the key existed stay the same."""
    chat: ChatSpec | None = None
    """Render prompts and observations through the policy's chat template (an instruct model's scenarios);
    None: as plain text (the character model's). Left out of the dump while None, as ``sandbox``."""

    @model_serializer(mode="wrap")
    def _omit_default_sandbox(self, handler):
        data = handler(self)
        if self.sandbox == "bubblewrap" and isinstance(data, dict):
            data.pop("sandbox", None)
        if self.chat is None and isinstance(data, dict):
            data.pop("chat", None)
        return data

    @model_validator(mode="after")
    def _schedule_fits(self) -> "ScenarioSpec":
        """Refuse an evaluation schedule of more than ``MAX_EVAL_POINTS`` points before anything is built."""
        total_h = sum(p.duration_h for p in self.phases)
        points = total_h / self.eval.interval_h + 1
        if not math.isfinite(total_h) or points > MAX_EVAL_POINTS:
            raise ValueError(f"{total_h:g} simulated hours evaluated every {self.eval.interval_h:g} h is "
                             f"{points:.3g} evaluations, more than {MAX_EVAL_POINTS:,}: shorten the phases or "
                             f"raise eval.interval_h")
        if total_h > MAX_SIMULATED_HOURS:
            raise ValueError(f"the phases last {total_h:g} simulated hours, more than {MAX_SIMULATED_HOURS:,g}: "
                             "such a run would not end; shorten the phases")
        return self

    @model_validator(mode="after")
    def _sources_exist(self, info: ValidationInfo) -> "ScenarioSpec":
        """Every source builds from its parameters (skipped under the context ``{"build_sources": False}``:
        the command line's quick check before torch loads, since a benchmark stream's source reads its rows)."""
        bad = [i for i in self.warm_start.phases or [] if not 0 <= i < len(self.phases)]
        if bad:
            raise ValueError(f"warm_start.phases {bad} are not phase indices (0..{len(self.phases) - 1})")
        if self.warm_start.phases is not None and self.warm_start.sources is not None:
            raise ValueError("warm_start: give phases or sources, not both")
        if not (info.context or {}).get("build_sources", True):
            return self
        for source in self.warm_start.sources or []:
            build_source(source.name, source.params)
        for phase in self.phases:
            for source in phase.sources:
                build_source(source.name, source.params)
        return self

    @property
    def duration_s(self) -> float:
        return sum(p.duration_h for p in self.phases) * HOUR

    @property
    def dis_band(self) -> tuple[float, float]:
        low, high = (0.3, 5.0) if self.domain == "reasoning" else (0.8, 3.0)
        return (self.dis_eps_low if self.dis_eps_low is not None else low,
                self.dis_eps_high if self.dis_eps_high is not None else high)


@dataclass(frozen=True)
class PhaseWindow:
    index: int
    name: str
    start_s: float
    end_s: float


class Scenario:
    """A scenario ready to serve tasks: ``next_task(t, rng)`` and per-phase held-out sets.

    ``seed`` is the run's: with ``latency.task_sigma > 0`` it keys each task's latency factor."""

    def __init__(self, spec: ScenarioSpec, *, seed: int = 0):
        self.spec = spec
        self.seed = seed
        self.sources: list[list[TaskSource]] = [
            [build_source(s.name, s.params) for s in phase.sources] for phase in spec.phases
        ]
        windows, start = [], 0.0
        for i, phase in enumerate(spec.phases):
            windows.append(PhaseWindow(i, phase.name, start, start + phase.duration_h * HOUR))
            start += phase.duration_h * HOUR
        self.windows: list[PhaseWindow] = windows
        self.warm_sources: list[TaskSource] | None = (
            None if spec.warm_start.sources is None
            else [build_source(s.name, s.params) for s in spec.warm_start.sources])

    @property
    def duration_s(self) -> float:
        return self.windows[-1].end_s

    @property
    def drift_times_s(self) -> list[float]:
        return [w.start_s for w in self.windows[1:]]

    def phase_at(self, t: float) -> PhaseWindow:
        for w in self.windows:
            if t < w.end_s:
                return w
        return self.windows[-1]

    def next_task(self, t: float, rng: np.random.Generator, index: int) -> Task:
        """Draw the task served at simulated time ``t`` (gradual transitions mix in the previous phase).

        With ``latency.task_sigma > 0`` the task carries its latency factor (``metadata["latency_factor"]``,
        ``LatencySpec.task_factor`` of the run's seed and the task's id), which its environment applies
        to every turn of every rollout; it draws nothing from ``rng``, so the task stream is unchanged."""
        window = self.phase_at(t)
        phase_idx = window.index
        transition_s = self.spec.phases[phase_idx].transition_h * HOUR
        if phase_idx > 0 and transition_s > 0 and t - window.start_s < transition_s:
            if rng.random() >= (t - window.start_s) / transition_s:
                phase_idx -= 1
        task = self._sample_from(phase_idx, rng, created_at=t, index=index)
        if self.spec.latency.task_sigma > 0:
            factor = self.spec.latency.task_factor(self.seed, task.id)
            task = dataclasses.replace(task, metadata={**task.metadata, "latency_factor": factor})
        return task

    def _sample_from(self, phase_idx: int, rng: np.random.Generator, *, created_at: float, index: int,
                     heldout: bool = False) -> Task:
        source = self._pick_source(phase_idx, rng)
        draw = source.sample_heldout if heldout and hasattr(source, "sample_heldout") else source.sample
        return draw(rng, phase=self.spec.phases[phase_idx].name, created_at=created_at, index=index)

    def _pick_source(self, phase_idx: int, rng: np.random.Generator) -> TaskSource:
        weights = np.array([s.weight for s in self.spec.phases[phase_idx].sources], dtype=float)
        k = int(rng.choice(len(weights), p=weights / weights.sum())) if len(weights) > 1 else 0
        return self.sources[phase_idx][k]

    def manifests(self) -> dict[str, dict]:
        """Each source's description of its train/held-out split, by ``<phase>/<source>`` (benchmark streams)."""
        out = {}
        for phase, sources in zip(self.spec.phases, self.sources):
            for source in sources:
                if hasattr(source, "manifest"):
                    out[f"{phase.name}/{source.name}"] = source.manifest()
        return out

    def demonstration(self, rng: np.random.Generator, index: int) -> tuple[Task, str | list[Turn]]:
        """A task and a correct response (or multi-turn transcript) from a phase chosen uniformly among
        ``warm_start.phases``, or from ``warm_start.sources`` (phase ``warm_start``): warm-start data."""
        if self.warm_sources is not None:
            weights = np.array([s.weight for s in self.spec.warm_start.sources], dtype=float)
            if np.all(weights == weights[0]):  # uniform: the draw of phases=None over one-source phases
                k = int(rng.integers(len(weights)))
            else:
                k = int(rng.choice(len(weights), p=weights / weights.sum()))
            source, phase = self.warm_sources[k], "warm_start"
        else:
            allowed = self.spec.warm_start.phases
            phase_idx = int(rng.integers(len(self.spec.phases))) if allowed is None else allowed[int(rng.integers(len(allowed)))]
            source, phase = self._pick_source(phase_idx, rng), self.spec.phases[phase_idx].name
        task = source.sample(rng, phase=phase, created_at=0.0, index=index)
        return task, source.demonstrate(task, rng)

    @property
    def eval_version(self) -> int:
        """How the held-out evaluation is keyed: the scenario's ``eval.version``, else ``EVAL_VERSION``."""
        return self.spec.eval.version or EVAL_VERSION

    @cached_property
    def eval_sets(self) -> dict[str, list[Task]]:
        """Held-out tasks per distinct phase name, fixed by the scenario: drawn from ``eval.seed`` alone, so
        every seed and every recipe meets the same set (version 3, sao_env/evaluation/heldout.py; only the
        sampling streams are keyed by the run's seed). The key ``[eval.seed, 0, phase]`` is the one version 2
        used for seed 0, so a seed-0 run evaluates the same tasks under both versions; under ``eval.version: 2``
        the run's seed takes the 0's place. A source with
        a held-out split (``sample_heldout``) serves them from that split."""
        sets: dict[str, list[Task]] = {}
        for i, phase in enumerate(self.spec.phases):
            if phase.name in sets:
                continue
            rng = np.random.default_rng([self.spec.eval.seed, self.seed if self.eval_version == 2 else 0, i])
            sets[phase.name] = [
                self._sample_from(i, rng, created_at=0.0, index=900_000 + j, heldout=True)
                for j in range(self.spec.eval.prompts_per_phase)
            ]
        return sets
