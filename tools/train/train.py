#!/usr/bin/python3
"""train.py - train the demo Qwen3.5 + MTP model (model.py) on the tokenised corpus.

  train.py --data DATA_DIR --out RUN_DIR [--steps N] [--time-limit SECONDS] ...

DATA_DIR holds train.u16 / heldout.u16 (uint16 token ids, from `prepare.py`) and the tokenizer.
Objective: mean next-token cross-entropy of the trunk + MTP_WEIGHT * mean cross-entropy of the MTP
head, whose row p = (embedding of x_p, trunk post-norm hidden h_{p-1}) predicts x_{p+1} (that is,
the token two ahead of h_{p-1}: the Qwen3-Next / DeepSeek-V3 MTP recipe; row 0 gets a zero hidden,
as the inference driver does).  The MTP loss also trains the trunk through h.
Optimiser AdamW(beta 0.9/0.95, weight decay 0.01 on matrices), linear warm-up then cosine decay to
10 % at --steps, or with --decay-start D warm-up-stable-decay: constant until step D, then linear
decay to 10 % at --steps.  WSD lets a run of unknown length be finished later: train with a large
--decay-start and --steps, then resume with --decay-start = the step reached and --steps = a few
hundred more; the result is identical to one run with those two values.  Gradient clipping at 1.0.

--distill (a last stage, after joint training): the trunk and the shared embedding are frozen and
only the MTP block (fc, its two input norms, its decoder layer, its final norm) is trained, on the
trunk's own distribution as a soft target: MTP row p and trunk row p both predict x_{p+1}, so the
loss is the cross-entropy of the MTP row against softmax(trunk logits of row p) (= KL + a constant).
This optimises what speculative decoding accepts (the draft agreeing with the target) instead of
agreement with the text; a frozen trunk keeps the target model's outputs unchanged.
--distill-chain N also trains the chained draft steps the decoder runs (draft-max > 1): step k feeds
the MTP block its own post-norm output of step k - 1 instead of the trunk's hidden, i.e. row p pairs
x_p with hout_{k-1}[p-1], and is scored against the same trunk row p; the loss is the mean over the
N steps.  (In training, step k's rows attend to other step-k rows; the decoder's draft rows attend
to the MTP cache of trunk-fed rows: an approximation, as in other MTP recipes.)

Deterministic and resumable: parameters come from --seed; the training windows of step s are drawn
from numpy's RNG seeded with (seed, s), so a resumed run sees exactly the batches an uninterrupted
one would.  RUN_DIR/ckpt.pt (model + optimiser + step) is rewritten atomically every --save-every
steps and when --time-limit is reached; RUN_DIR/log.jsonl gets one JSON line per step and per eval.
Run it again with the same arguments to resume.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import DEFAULT_CONFIG, Qwen35MTP  # noqa: E402

DEMO_CONFIG = dict(DEFAULT_CONFIG, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   linear_num_key_heads=2, linear_num_value_heads=4,
                   linear_key_head_dim=32, linear_value_head_dim=32)

# command-line flags that set the model shape, and the config key each one sets
SHAPE_FLAGS = [("--hidden", "hidden_size"), ("--ffn", "intermediate_size"), ("--layers", "num_hidden_layers"),
               ("--interval", "full_attention_interval"),
               ("--heads", "num_attention_heads"), ("--kv-heads", "num_key_value_heads"), ("--head-dim", "head_dim"),
               ("--lin-k-heads", "linear_num_key_heads"), ("--lin-v-heads", "linear_num_value_heads"),
               ("--lin-k-dim", "linear_key_head_dim"), ("--lin-v-dim", "linear_value_head_dim")]


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.decay_start is not None:       # warm-up, stable, then linear decay to 10 % at --steps
        t = min(1.0, max(0, step - a.decay_start) / max(1, a.steps - a.decay_start))
        return a.lr * (1.0 - 0.9 * t)
    t = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def batch(data, step, a):
    rng = np.random.default_rng([a.seed, step])
    off = rng.integers(0, len(data) - a.seq - 1, size=a.batch)
    return torch.from_numpy(np.stack([data[o:o + a.seq + 1] for o in off]).astype(np.int64))


def distill_losses(model, ids, chain=1):
    """--distill: (trunk CE, soft CE of the MTP rows against the frozen trunk's distribution,
    CE of the MTP rows against the text), each the mean over `chain` chained draft steps."""
    x, y = ids[:, :-1], ids[:, 1:]
    with torch.no_grad():
        logits, h = model(x)
        teacher = F.softmax(logits, dim=-1)
    V = logits.shape[-1]
    soft = hard = 0.0
    for _ in range(chain):
        mlogits, h = model.mtp_forward(x, h)     # the next step is fed this step's own hidden
        soft = soft - (teacher * F.log_softmax(mlogits, dim=-1)).sum(-1).mean() / chain
        hard = hard + F.cross_entropy(mlogits.reshape(-1, V), y.reshape(-1)) / chain
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)), soft, hard


def losses(model, ids):
    """ids [B, T+1] -> (trunk CE, MTP CE, trunk logits, MTP logits) on the first T positions."""
    x, y = ids[:, :-1], ids[:, 1:]
    logits, h = model(x)
    mlogits, _ = model.mtp_forward(x, h)
    V = logits.shape[-1]
    return (F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)),
            F.cross_entropy(mlogits.reshape(-1, V), y.reshape(-1)), logits, mlogits)


@torch.no_grad()
def evaluate(model, held, seq, n_windows):
    """Held-out figures on n_windows windows of seq+1 tokens spread evenly over the held-out set
    (which holds Bible chapters first, then C, Python, man pages).
    MTP top-1 counts rows p >= 1 only (row 0 has no trunk hidden to condition on).
    mtp_agrees_with_trunk: how often the MTP row p's argmax equals the trunk's argmax at p (both
    predict x_{p+1}): the greedy acceptance rate of a first draft token under teacher forcing."""
    model.eval()
    n = min(n_windows, (len(held) - 1) // seq)
    stride = (len(held) - seq - 1) // max(1, n - 1) if n > 1 else 0
    tl = ml = 0.0
    hit = tot = thit = agree = 0
    for i in range(n):
        ids = torch.from_numpy(held[i * stride:i * stride + seq + 1].astype(np.int64))[None]
        lt, lm, logits, mlogits = losses(model, ids)
        tl += lt.item()
        ml += lm.item()
        y = ids[0, 1:]
        hit += (mlogits[0, 1:].argmax(-1) == y[1:]).sum().item()
        thit += (logits[0].argmax(-1) == y).sum().item()
        agree += (mlogits[0, 1:].argmax(-1) == logits[0, 1:].argmax(-1)).sum().item()
        tot += seq
    model.train()
    tl, ml = tl / n, ml / n
    return {"heldout_loss": tl, "heldout_ppl": math.exp(tl), "heldout_mtp_loss": ml,
            "trunk_top1": thit / tot, "mtp_top1": hit / (tot - n),
            "mtp_agrees_with_trunk": agree / (tot - n), "eval_tokens": tot}


def save(path, model, opt, step, a):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "config": model.cfg,
                "args": vars(a)}, tmp)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--decay-start", type=int, default=None,
                    help="constant lr until this step, then linear decay to 10 %% at --steps (default: cosine)")
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--distill", action="store_true",
                    help="train only the MTP block, on the frozen trunk's distribution (see above)")
    ap.add_argument("--distill-chain", type=int, default=1,
                    help="with --distill: chained draft steps trained (1 = the first draft only)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: OpenBLAS threads spin badly on an oversubscribed machine)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=32)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--time-limit", type=float, default=0, help="stop (and save) after this many seconds")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop (and save) after this step; the lr schedule still ends at --steps")
    ap.add_argument("--init", help="start from these parameters (e.g. grow.py's output) instead of random "
                                   "ones, when RUN_DIR has no checkpoint yet")
    # model shape (defaults: the first 1.6 M-parameter demo model, DEMO_CONFIG)
    for flag, key in SHAPE_FLAGS:
        ap.add_argument(flag, type=int, default=DEMO_CONFIG[key], help=key)
    a = ap.parse_args(argv)
    cfg = dict(DEMO_CONFIG, **{key: getattr(a, flag[2:].replace("-", "_")) for flag, key in SHAPE_FLAGS})
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    train = np.fromfile(os.path.join(a.data, "train.u16"), dtype=np.uint16)
    held = np.fromfile(os.path.join(a.data, "heldout.u16"), dtype=np.uint16)
    model = Qwen35MTP(cfg)
    if a.distill:                       # only the MTP block learns; trunk and embedding stay as they are
        for n, p in model.named_parameters():
            p.requires_grad_(n.startswith("mtp."))
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trainable if p.dim() == 2]
    no_decay = [p for n, p in trainable if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    ckpt = os.path.join(a.out, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        if st["config"] != cfg:
            sys.exit(f"train: {ckpt} was trained with config {st['config']}, not the requested {cfg}")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        print(f"train: resumed at step {step}", flush=True)
    elif a.init:
        st = torch.load(a.init)
        if st["config"] != cfg:
            sys.exit(f"train: {a.init} has config {st['config']}, not the requested {cfg}")
        model.load_state_dict(st["model"])
        print(f"train: parameters from {a.init}, fresh optimiser, step 0", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train: {n_params} parameters, {len(train)} train tokens, {len(held)} held-out tokens", flush=True)
    log = open(os.path.join(a.out, "log.jsonl"), "a")
    t0 = time.time()
    while step < a.steps and not (a.stop_at and step >= a.stop_at):
        ts = time.time()
        lr = lr_at(step, a)
        for gr in opt.param_groups:
            gr["lr"] = lr
        if a.distill:
            lt, loss, lm = distill_losses(model, batch(train, step, a), a.distill_chain)
        else:
            lt, lm, _, _ = losses(model, batch(train, step, a))
            loss = lt + a.mtp_weight * lm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trainable], 1.0)
        opt.step()
        step += 1
        dt = time.time() - ts
        rec = {"step": step, "loss": lt.item(), "mtp_loss": lm.item(), "lr": lr,
               "tok_per_s": a.batch * a.seq / dt, "time": time.time()}
        if a.distill:
            rec["distill_loss"] = loss.item()   # the soft CE it optimises; mtp_loss stays CE vs the text
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if step % 10 == 0:
            print(f"step {step} loss {rec['loss']:.3f} mtp {rec['mtp_loss']:.3f} lr {lr:.2e} "
                  f"{rec['tok_per_s']:.0f} tok/s", flush=True)
        if step % a.eval_every == 0 or step == a.steps:
            ev = evaluate(model, held, a.seq, a.eval_windows)
            ev["step"] = step
            log.write(json.dumps(ev) + "\n")
            log.flush()
            print("eval " + json.dumps(ev), flush=True)
        stop = (a.time_limit and time.time() - t0 > a.time_limit) or step == a.stop_at
        if step % a.save_every == 0 or step == a.steps or stop:
            save(ckpt, model, opt, step, a)
        if stop:
            print(f"train: stopped at step {step} (--time-limit / --stop-at)", flush=True)
            break


if __name__ == "__main__":
    main()
