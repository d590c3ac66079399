"""Can independent runs share one forward pass? Row independence and cost of the lean forward, and the stacked one.

Issue 24 asks for many runs advanced in one process with each run's logs byte-identical to the run
made alone. This bench measures, under pinned numerics (set below, before torch is imported), on the
tiny-qwen2 policy (the style-drift warm start when it is cached, else a fresh tiny model):

1. row independence: is a row's result the same bits whatever batch it is computed in (1, 3, 8, 32
   rows, different left padding)? For ``F.linear`` at the model's shapes, attention
   (``scaled_dot_product_attention`` with masks), ``rms_norm``, ``log_softmax``, and end to end
   (``LeanDecoder`` logits, ``generate.sample`` tokens and log-probabilities);
2. what a prefill and a decode step cost per call for B in {1, 3, 8, 32} rows (per-call overhead);
3. one decode step and one learner pass over K models: K lean calls, ``StackedDecoder`` (stacked
   parameters, ``torch.baddbmm``) and ``torch.func.vmap`` over ``functional_call``-style stacked
   parameters: time and whether each gives every model's own bits;
4. generation at the style-drift shapes (3-8 rows per call per run, 24 new tokens, the scenario's
   prompts): episodes/s for K = 1, 2, 4, 8 runs stacked (``stacked.sample_many``) against K separate
   ``sample`` calls, and whether every sample is bit-identical;
5. the learner pass (``sequence_logprobs`` forward and backward) over K runs stacked against K
   separate passes: time, and how many parameters' gradients are bit-identical.

Run: ``python bench/bench_stacked.py [--rounds 5] [--quick]``. Timings are the best of interleaved
rounds on one thread (a shared machine slows some rounds; the best is the least disturbed).
"""

from __future__ import annotations

import os

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
          "ONEDNN_MAX_CPU_ISA": "AVX2"}
os.environ.update(PINNED)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sao_env.policy.generate import row_key, sample, sequence_logprobs  # noqa: E402
from sao_env.policy.lean import LeanDecoder  # noqa: E402
from sao_env.policy.stacked import StackedDecoder, sample_many, sequence_logprobs_many  # noqa: E402

torch.set_num_threads(1)


# -- set-up ------------------------------------------------------------------------------------------
def load_policy_and_prompts():
    """The style-drift warm start (when cached) and its held-out prompts (token ids, by phase)."""
    from sao_env.experiment import resolve_config
    from sao_env.policy.model import build_policy, build_tokenizer
    from sao_env.policy.warmstart import is_cached, load_warm_started, warm_start_path
    from sao_env.scenario import Scenario

    config = resolve_config("style-drift", "sao", 0, [])
    scenario = Scenario(config.env)
    path = warm_start_path(config.agent.model, scenario)
    if path is not None and is_cached(path):
        model, tok, _ = load_warm_started(config.agent.model, scenario, show_progress=False)
        source = "style-drift warm start"
    else:
        tok = build_tokenizer(config.agent.model)
        model, source = build_policy(config.agent.model, tok, seed=0), "untrained tiny-qwen2 (no warm start cached)"
    prompts = {phase: [tok(t.prompt, add_special_tokens=False)["input_ids"] for t in tasks]
               for phase, tasks in scenario.eval_sets.items()}
    return model.eval(), tok, prompts, source, config.env.max_new_tokens


def variants(model, k: int, sigma: float = 0.01):
    """k copies of ``model`` moved apart by relative noise (independent runs after some updates)."""
    import copy

    out = []
    for i in range(k):
        m = copy.deepcopy(model).eval()
        g = torch.Generator().manual_seed(1000 + i)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(sigma * p.abs().mean() * torch.randn(p.shape, generator=g))
        out.append(m)
    return out


def timeit(fn, repeat: int, inner: int = 1) -> float:
    """Seconds of one call: the best of ``repeat`` timings of ``inner`` calls (the least disturbed by
    other processes on a shared machine)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return min(times)


def diff(a: torch.Tensor, b: torch.Tensor) -> str:
    return "equal" if torch.equal(a, b) else f"max |d| {(a - b).abs().max().item():.1e}"


# -- 1. row independence --------------------------------------------------------------------------------
def row_independence(model, prompts_by_phase, tok, max_new):
    lean = LeanDecoder(model)
    cfg = model.config
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    N, G, D = lean.num_heads, lean.num_kv_heads, lean.head_dim
    g = torch.Generator().manual_seed(0)
    print("\n1. Row independence under the pin: is row 0 the same bits in a batch of B rows as alone?")
    shapes = {"qkv": ((N + 2 * G) * D, H), "o": (H, H), "gate|up": (2 * I, H), "down": (H, I), "head": (V, H)}
    print(f"   F.linear (M rows): {'shape':<12} " + " ".join(f"M={m:<4}" for m in (1, 2, 3, 4, 8, 32, 1024)))
    for name, (O, K) in shapes.items():
        w, b, x = torch.randn(O, K, generator=g), torch.randn(O, generator=g), torch.randn(1024, K, generator=g)
        ref = F.linear(x, w, b)[:1]
        print(f"   {'':<19}{name + ' ' + str((O, K)):<12} "
              + " ".join(f"{'same' if torch.equal(F.linear(x[:m], w, b)[:1], ref) else 'DIFF':<6}" for m in (1, 2, 3, 4, 8, 32, 1024))
              + "   (against M=1024)")
    small = [F.linear(x[:m], w, b)[:1] for m in (1, 2, 3, 4)]
    print(f"   M=1,2,3,4 pairwise: " + ", ".join(f"{a}-{c}: {diff(small[a - 1], small[c - 1])}"
                                              for a, c in ((1, 2), (2, 3), (3, 4), (1, 4))))
    # attention
    L = 39
    q0, k0, v0 = (torch.randn(1, n, L, D, generator=g) for n in (N, G, G))
    ref = F.scaled_dot_product_attention(q0, k0, v0, is_causal=True, scale=D ** -0.5, enable_gqa=True)
    line = []
    for B in (1, 3, 8, 32):
        for pad in (0, 1, 3, 8, 16):
            S = L + pad
            q, k, v = (torch.randn(B, n, S, D, generator=g) for n in (N, G, G))
            q[0, :, pad:], k[0, :, pad:], v[0, :, pad:] = q0[0], k0[0], v0[0]
            valid = torch.ones(B, S, dtype=torch.bool)
            valid[0, :pad] = False
            allowed = torch.ones(S, S, dtype=torch.bool).tril() & (valid[:, None, :] | torch.eye(S, dtype=torch.bool))
            mask = torch.zeros(B, 1, S, S).masked_fill_(~allowed[:, None], float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=D ** -0.5, enable_gqa=True)[:1, :, pad:]
            line.append(f"B={B} pad={pad}: {diff(out, ref)}")
    print("   SDPA prefill (L=39, row 0 left-padded by pad):\n     " + "\n     ".join(
        ", ".join(line[i : i + 5]) for i in range(0, len(line), 5)))
    rr = []
    for extra in (1, 3, 8, 25):
        q, k, v = (torch.cat([t, torch.randn(1, t.shape[1], extra, D, generator=g)], 2) for t in (q0, k0, v0))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=D ** -0.5, enable_gqa=True)[:, :, :L]
        rr.append(f"+{extra}: {diff(out, ref)}")
    print("   SDPA causal, right padding (learner pass): " + ", ".join(rr))
    x = torch.randn(1024, H, generator=g)
    wn = torch.randn(H, generator=g)
    ln = torch.randn(1024, V, generator=g)
    print("   rms_norm: " + ", ".join(f"M={m}: {diff(F.rms_norm(x[:m], (H,), wn, 1e-6)[:1], F.rms_norm(x, (H,), wn, 1e-6)[:1])}"
                                    for m in (1, 3, 8, 32)))
    print("   log_softmax: " + ", ".join(f"M={m}: {diff(torch.log_softmax(ln[:m], -1)[:1], torch.log_softmax(ln, -1)[:1])}"
                                       for m in (1, 3, 8, 32)))
    # end to end: the lean forward's logits for row 0 in batches with other rows of other lengths
    phases = list(prompts_by_phase)
    target = prompts_by_phase[phases[0]][0]
    others = [p for ph in phases for p in prompts_by_phase[ph][1:]]
    rng = np.random.default_rng(0)
    with torch.no_grad():
        def prefill(batch):
            longest = max(len(p) for p in batch)
            ids = torch.full((len(batch), longest), tok.pad_token_id)
            valid = torch.zeros(len(batch), longest, dtype=torch.bool)
            for i, p in enumerate(batch):
                ids[i, longest - len(p):] = torch.tensor(p)
                valid[i, longest - len(p):] = True
            pos = (valid.long().cumsum(-1) - 1).clamp(min=0)
            cache = lean.new_cache(len(batch), longest + 1)
            h = lean.hidden(ids, position_ids_BT=pos, key_valid_BS=valid, cache=cache)
            first = lean.logits(h[:, -1])[0]
            step = lean.hidden(torch.full((len(batch), 1), 20), position_ids_BT=pos[:, -1:] + 1,
                               key_valid_BS=torch.cat([valid, torch.ones(len(batch), 1, dtype=torch.bool)], 1), cache=cache)
            return first, lean.logits(step[:, -1])[0]

        alone = prefill([target])
        out = []
        for B in (3, 8, 32):
            for longer in (False, True):
                rest = [others[i] for i in rng.choice(len(others), B - 1, replace=False)]
                if longer:
                    rest[0] = rest[0] + [17, 18, 19]  # row 0 gets 3 (or more) positions of left padding
                got = prefill([target] + rest)
                out.append(f"B={B}{' padded' if longer else ''}: prefill {diff(got[0], alone[0])}, decode {diff(got[1], alone[1])}")
        print("   LeanDecoder logits of row 0 (a prompt of the scenario), against alone:\n     " + "\n     ".join(out))
    kw = dict(max_new_tokens=max_new, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    batch = [p for ph in phases for p in prompts_by_phase[ph][:11]][:32]  # 38- and 39-token prompts
    keys = [row_key(7, i) for i in range(len(batch))]
    for B in (3, 8, 32):
        together = sample(model, batch[:B], row_keys=keys[:B], **kw)
        tok_same = logp_same = 0
        for i in range(B):
            (one,) = sample(model, [batch[i]], row_keys=[keys[i]], **kw)
            tok_same += one.token_ids == together[i].token_ids
            logp_same += one.logps == together[i].logps
        print(f"   sample(): {B} rows alone vs together: tokens identical {tok_same}/{B}, log-probs bit-identical {logp_same}/{B}")


# -- 2. per-call cost -------------------------------------------------------------------------------------
def call_costs(model, prompts, repeat):
    lean = LeanDecoder(model)
    print("\n2. Cost per call of the lean forward (best ms; one thread), 39-token prompts")
    print(f"   {'B':>3} {'prefill':>9} {'decode step':>12} {'step/row':>9}")
    p = prompts[0]
    with torch.no_grad():
        for B in (1, 3, 8, 32):
            ids = torch.tensor([p] * B)
            pos = torch.arange(len(p)).expand(B, -1)

            def pre():
                cache = lean.new_cache(B, len(p) + 25)
                lean.hidden(ids, position_ids_BT=pos, cache=cache)
                return cache

            cache = pre()
            step_ids, step_pos = torch.full((B, 1), 20), torch.full((B, 1), len(p))

            def dec():
                cache.length = len(p)
                h = lean.hidden(step_ids, position_ids_BT=step_pos, cache=cache)
                lean.logits(h[:, -1])

            t_pre, t_dec = timeit(pre, repeat, 20), timeit(dec, repeat, 50)
            print(f"   {B:>3} {t_pre * 1e3:>9.3f} {t_dec * 1e3:>12.3f} {t_dec * 1e3 / B:>9.3f}")
        t_op = timeit(lambda: F.linear(ids[:1, :1].float().expand(1, 96), model.lm_head.weight), repeat, 200)
        print(f"   one tiny F.linear call: {t_op * 1e6:.1f} us (the floor a decode step of ~70 operator calls pays)")


# -- 3. formulations of the stacked forward ---------------------------------------------------------------
class _LeanPass(torch.nn.Module):
    """The lean learner pass (logits of every position) as a module, for ``torch.func.functional_call``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.lean = LeanDecoder(model)

    def forward(self, ids):
        return self.lean.logits(self.lean.hidden(ids))


def vmap_forward(models):
    """K models' lean passes as ``vmap`` over ``functional_call`` with their parameters stacked.

    Runs the unfused (gradient-mode) branch of ``LeanDecoder.hidden``: its fused-weight cache is keyed
    on the module's own parameters and would not see the swapped ones.
    """
    from torch.func import functional_call, stack_module_state, vmap

    params, buffers = stack_module_state([_LeanPass(m) for m in models])
    params = {k: v.detach() for k, v in params.items()}
    base = _LeanPass(models[0])

    def one(p, b, ids):
        return functional_call(base, (p, b), (ids,))

    def run(ids_KBT):
        with torch.enable_grad():
            return vmap(one)(params, buffers, ids_KBT)

    return run


def formulations(base, prompts, repeat):
    print("\n3. One pass over K models: K lean calls, StackedDecoder (baddbmm), vmap over stacked parameters")
    print(f"   {'K':>2} {'what':<26} {'K lean ms':>10} {'stacked ms':>11} {'vmap ms':>9}  bits (stacked / vmap vs own)")
    p = prompts[0]
    for K in (2, 8):
        models = variants(base, K)
        stacked = StackedDecoder(models)
        leans = [LeanDecoder(m) for m in models]
        for what, B in (("decode step, 4 rows", 4), ("learner pass 8x39, no grad", 8)):
            with torch.no_grad():
                if what.startswith("decode"):
                    prompts_k = [[p] * B for _ in range(K)]
                    keys = [[row_key(k, i) for i in range(B)] for k in range(K)]

                    def own(tokens=1):
                        return [sample(m, prompts_k[k], row_keys=keys[k], max_new_tokens=tokens, eos_token_id=-1,
                                       pad_token_id=0) for k, m in enumerate(models)]

                    def st(tokens=1):
                        return sample_many(stacked, prompts_k, row_keys=keys, max_new_tokens=tokens, eos_token_id=-1,
                                           pad_token_id=0)

                    # a 1-token sample is a prefill; a decode step is the difference of 2 and 1 tokens
                    def own2():
                        return own(2)

                    def st2():
                        return st(2)

                    t_own = timeit(own2, repeat, 5) - timeit(own, repeat, 5)
                    t_st = timeit(st2, repeat, 5) - timeit(st, repeat, 5)
                    same = all(a.token_ids == b.token_ids and a.logps == b.logps
                               for x, y in zip(own2(), st2()) for a, b in zip(x, y))
                    print(f"   {K:>2} {what:<26} {t_own * 1e3:>10.3f} {t_st * 1e3:>11.3f} {'-':>9}  "
                          f"{'identical' if same else 'DIFFER'} / -")
                else:
                    ids = torch.tensor([p] * B)
                    tokens = torch.cat([ids, ids[:, :1]], 1)
                    att = torch.ones_like(tokens)
                    ids_K = ids[None].expand(K, -1, -1).contiguous()
                    vm = vmap_forward(models)
                    t_own = timeit(lambda: [l.logits(l.hidden(ids)) for l in leans], repeat, 5)
                    t_st = timeit(lambda: sequence_logprobs_many(stacked, [(tokens, att)] * K), repeat, 5)
                    try:
                        vm_out = vm(ids_K)
                        t_vm = timeit(lambda: vm(ids_K), repeat, 5)
                        with torch.enable_grad():  # the same (unfused) branch alone
                            own_unfused = [leans[k].logits(leans[k].hidden(ids)).detach() for k in range(K)]
                        vm_bits = all(torch.equal(vm_out[k], own_unfused[k]) for k in range(K))
                        vm_s, vm_b = f"{t_vm * 1e3:>9.3f}", "identical" if vm_bits else "DIFFER"
                    except Exception as e:  # vmap may have no batching rule for an operator
                        vm_s, vm_b = f"{'n/a':>9}", f"vmap failed: {type(e).__name__}: {str(e)[:60]}"
                    many = sequence_logprobs_many(stacked, [(tokens, att)] * K)
                    st_bits = all(torch.equal(many[k][0], sequence_logprobs(models[k], tokens, att)[0]) for k in range(K))
                    print(f"   {K:>2} {what:<26} {t_own * 1e3:>10.3f} {t_st * 1e3:>11.3f} {vm_s}  "
                          f"{'identical' if st_bits else 'DIFFER'} / {vm_b}")


# -- 4. generation at the style-drift shapes -------------------------------------------------------------------
def generation(base, tok, prompts_by_phase, max_new, rounds, calls, mixed: bool):
    phases = list(prompts_by_phase)
    kw = dict(max_new_tokens=max_new, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    label = "runs in different phases (38/39-token prompts)" if mixed else "runs in one phase"
    print(f"\n4. Generation, style-drift shapes ({label}): 3-8 rows per call per run, {max_new} new tokens")
    print(f"   {'K':>2} {'separate ep/s':>14} {'stacked ep/s':>13} {'speed-up':>9}  samples bit-identical")
    for K in (1, 2, 4, 8):
        models = variants(base, K)
        stacked = StackedDecoder(models)
        rng = np.random.default_rng(K)
        work = []
        for c in range(calls):
            per_run = []
            for k in range(K):
                phase = phases[(k + c) % len(phases)] if mixed else phases[c % len(phases)]
                n = int(rng.integers(3, 9))
                pool = prompts_by_phase[phase]
                per_run.append(([pool[i] for i in rng.choice(len(pool), n, replace=False)],
                                [row_key(K, c, k, i) for i in range(n)]))
            work.append(per_run)
        episodes = sum(len(p) for per_run in work for p, _ in per_run)

        def separate():
            return [[sample(models[k], p, row_keys=keys, **kw) for k, (p, keys) in enumerate(per_run)] for per_run in work]

        def together():
            return [sample_many(stacked, [p for p, _ in per_run], row_keys=[keys for _, keys in per_run], **kw)
                    for per_run in work]

        t_sep, t_st = [], []
        for r in range(rounds):  # interleaved
            for fn, acc in ((separate, t_sep), (together, t_st)) if r % 2 == 0 else ((together, t_st), (separate, t_sep)):
                start = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - start)
        a, b = separate(), together()
        same = sum(x.token_ids == y.token_ids and x.logps == y.logps and x.finished == y.finished
                   for ra, rb in zip(a, b) for sa, sb in zip(ra, rb) for x, y in zip(sa, sb))
        ep_sep, ep_st = episodes / min(t_sep), episodes / min(t_st)
        print(f"   {K:>2} {ep_sep:>14.0f} {ep_st:>13.0f} {ep_st / ep_sep:>8.2f}x  {same}/{episodes}")


# -- 5. learner pass ------------------------------------------------------------------------------------------
def learner(base, tok, prompts_by_phase, max_new, repeat):
    print("\n5. Learner pass (sequence_logprobs, forward + backward), 8 rows of prompt+answer per run")
    print(f"   {'K':>2} {'separate ms':>12} {'stacked ms':>11} {'speed-up':>9}  logp identical, grads identical (tensors)")
    phases = list(prompts_by_phase)
    for K in (2, 4, 8):
        models = variants(base, K)
        stacked = StackedDecoder(models)
        rng = np.random.default_rng(10 + K)
        batches = []
        for k in range(K):
            pool = prompts_by_phase[phases[k % len(phases)]]
            rows = [pool[i] + list(rng.integers(4, 99, int(rng.integers(6, max_new + 1)))) for i in range(8)]
            T = max(len(r) for r in rows)
            tokens = torch.full((8, T), tok.pad_token_id)
            att = torch.zeros(8, T, dtype=torch.long)
            for i, r in enumerate(rows):
                tokens[i, : len(r)], att[i, : len(r)] = torch.tensor(r), 1
            batches.append((tokens, att))

        def separate():
            for m in models:
                m.zero_grad()
            out = [sequence_logprobs(m, *b) for m, b in zip(models, batches)]
            sum((lp * b[1]).sum() for (lp, _), b in zip(out, batches)).backward()
            return out

        def together():
            for m in models:
                m.zero_grad()
            out = sequence_logprobs_many(stacked, batches)
            sum((lp * b[1]).sum() for (lp, _), b in zip(out, batches)).backward()
            return out

        t_sep, t_st = timeit(separate, repeat, 3), timeit(together, repeat, 3)
        a = separate()
        ga = [[p.grad.clone() for p in m.parameters()] for m in models]
        b = together()
        gb = [[p.grad.clone() for p in m.parameters()] for m in models]
        lp_same = sum(torch.equal(x[0], y[0]) for x, y in zip(a, b))
        g_same = sum(torch.equal(x, y) for xa, xb in zip(ga, gb) for x, y in zip(xa, xb))
        g_all = sum(len(x) for x in ga)
        worst = max((x - y).abs().max().item() / max(x.abs().max().item(), 1e-30) for xa, xb in zip(ga, gb) for x, y in zip(xa, xb))
        print(f"   {K:>2} {t_sep * 1e3:>12.2f} {t_st * 1e3:>11.2f} {t_sep / t_st:>8.2f}x  {lp_same}/{K}, {g_same}/{g_all} "
              f"(worst relative difference {worst:.1e})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per figure")
    parser.add_argument("--calls", type=int, default=12, help="generation calls per run and round in section 4")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    repeat = 3 if args.quick else 5
    print("pinned: " + " ".join(f"{k}={v}" for k, v in PINNED.items()) + f"; torch {torch.__version__}, "
          f"dispatch {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}")
    model, tok, prompts, source, max_new = load_policy_and_prompts()
    print(f"policy: {source}, {sum(p.numel() for p in model.parameters())} parameters")
    row_independence(model, prompts, tok, max_new)
    call_costs(model, prompts[next(iter(prompts))], repeat)
    formulations(model, prompts[next(iter(prompts))], repeat)
    for mixed in (False, True):
        generation(model, tok, prompts, max_new, args.rounds, 4 if args.quick else args.calls, mixed)
    learner(model, tok, prompts, max_new, repeat)


if __name__ == "__main__":
    main()
