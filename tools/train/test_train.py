#!/usr/bin/python3
"""test_train.py - tests of the training pipeline (run: /usr/bin/python3 tools/train/test_train.py).

* chunk-parallel gated delta rule == the sequential oracle (qwen35_ref) in float64, for chunk sizes
  that do and do not divide T, with Hv > Hk grouping, strong and weak decay; and its gradients
  equal the sequential form's;
* the training model, exported with export.py, gives the same trunk and MTP logits as the
  independent float64 reference tools/reference/qwen35_ref.py reading the exported HF folder;
* the BPE trainer: merges are learned in frequency order with deterministic ties, encode/decode
  round-trips arbitrary UTF-8 and special tokens, and training is deterministic;
* grow.py: the depth-grown model computes exactly the old model's trunk and MTP logits, and
  train.py --init starts from it;
* train.py: the shape flags set the model config; a run stopped (--stop-at) and resumed equals an uninterrupted
  one bit for bit; resuming with a different shape is refused.
Needs python3-torch, python3-numpy, python3-regex (scripts/deps.sh --python).
"""
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import bpe  # noqa: E402
import numpy as np  # noqa: E402
import train  # noqa: E402
import export  # noqa: E402
import grow  # noqa: E402
from model import DEFAULT_CONFIG, Qwen35MTP, chunk_gated_delta_rule  # noqa: E402
from qwen35_ref import Qwen35Ref, gated_delta_rule_sequential  # noqa: E402

torch.set_num_threads(1)
DT = torch.float64


def rand_inputs(B, T, H, dk, dv, gscale, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=g, dtype=DT), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=g, dtype=DT), dim=-1)
    v = torch.randn(B, T, H, dv, generator=g, dtype=DT)
    gg = -torch.rand(B, T, H, generator=g, dtype=DT) * gscale
    beta = torch.rand(B, T, H, generator=g, dtype=DT)
    return q, k, v, gg, beta


def sequential(q, k, v, g, beta):
    return torch.stack([gated_delta_rule_sequential(q[b], k[b], v[b], g[b], beta[b]) for b in range(q.shape[0])])


class ChunkedDeltaRule(unittest.TestCase):
    def test_matches_sequential(self):
        for T, chunk, gscale in [(64, 64, 1.0), (100, 32, 3.0), (37, 16, 0.01), (5, 64, 8.0), (130, 64, 0.5)]:
            q, k, v, g, beta = rand_inputs(2, T, 3, 16, 8, gscale, T)
            got = chunk_gated_delta_rule(q, k, v, g, beta, chunk)
            want = sequential(q, k, v, g, beta)
            err = (got - want).abs().max().item()
            self.assertLess(err, 1e-10, f"T={T} chunk={chunk}: max abs diff {err}")

    def test_float32_close(self):
        q, k, v, g, beta = rand_inputs(1, 128, 2, 32, 32, 1.0, 7)
        got = chunk_gated_delta_rule(*(x.float() for x in (q, k, v, g, beta)), chunk=64).double()
        want = sequential(q, k, v, g, beta)
        self.assertLess((got - want).abs().max().item(), 1e-4)

    def test_gradients_match(self):
        ins = rand_inputs(1, 40, 2, 8, 4, 1.0, 3)
        a = [x.clone().requires_grad_(True) for x in ins]
        b = [x.clone().requires_grad_(True) for x in ins]
        w = torch.randn(1, 40, 2, 4, dtype=DT, generator=torch.Generator().manual_seed(1))
        (chunk_gated_delta_rule(*a, chunk=16) * w).sum().backward()
        (sequential(*b) * w).sum().backward()
        for x, y in zip(a, b):
            self.assertLess((x.grad - y.grad).abs().max().item(), 1e-9)

    def test_wrong_result_is_detected(self):
        """The comparison can fail: dropping the decay changes the output."""
        q, k, v, g, beta = rand_inputs(1, 64, 2, 8, 4, 1.0, 5)
        got = chunk_gated_delta_rule(q, k, v, torch.zeros_like(g), beta, 32)
        self.assertGreater((got - sequential(q, k, v, g, beta)).abs().max().item(), 1e-3)


class ModelVsReference(unittest.TestCase):
    def test_exported_checkpoint_matches_reference(self):
        cfg = dict(DEFAULT_CONFIG, vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                   linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)
        torch.manual_seed(0)
        m = Qwen35MTP(cfg)
        with torch.no_grad():            # non-trivial norms, biases and larger weights than the init
            for name, p in m.named_parameters():
                if p.dim() == 1:
                    p.add_(torch.randn_like(p) * 0.2)
                elif "embed" in name:
                    p.mul_(20.0)
                else:
                    p.mul_(4.0)
        for mod in m.modules():          # T > chunk so that the state crosses a chunk boundary
            if hasattr(mod, "chunk"):
                mod.chunk = 8
        with tempfile.TemporaryDirectory() as d:
            tok = os.path.join(d, "tok")
            bpe.save(tok, bpe.train("hello world " * 50 + "in the beginning", 300))
            hf = os.path.join(d, "hf")
            export.export_state(m.state_dict(), cfg, tok, hf)
            ref = Qwen35Ref(hf)
            ids = [int(x) for x in torch.randint(0, 297, (21,), generator=torch.Generator().manual_seed(2))]
            want_logits, want_h = ref.forward(ids)
            want_mtp, _ = ref.mtp(ids, want_h)
        m = m.double()
        with torch.no_grad():
            logits, h = m(torch.tensor([ids]))
            mtp, _ = m.mtp_forward(torch.tensor([ids]), h)
        self.assertGreater(want_logits.std().item(), 0.5)       # the comparison is not between zeros
        self.assertLess((logits[0] - want_logits).abs().max().item(), 1e-6)
        self.assertLess((mtp[0] - want_mtp).abs().max().item(), 1e-6)


class BPE(unittest.TestCase):
    def test_merge_order_and_ties(self):
        merges = bpe.train("ab ab ab cd cd", 256 + 3 + 3)
        # pre-tokens: "ab" x1, "Ġab" x2, "Ġcd" x2 (Ġ = space).  (a,b) occurs 3x and goes first; then
        # (c,d), (Ġ,ab), (Ġ,c) all occur 2x and the lexicographically smallest pair wins.
        self.assertEqual(merges[0], ("a", "b"))
        self.assertEqual(merges[1], ("c", "d"))       # 'c' < 'Ġ'
        self.assertEqual(merges[2], ("Ġ", "ab"))
        self.assertEqual(bpe.train("ab ab ab cd cd", 262), merges)

    def test_roundtrip(self):
        text = ("In the beginning God created the heaven and the earth.\n  2 And the earth\n"
                "int main(void) { return 0; }\n")
        with tempfile.TemporaryDirectory() as d:
            bpe.save(d, bpe.train(text * 5, 320))
            enc = bpe.Encoder(d)
            for s in [text, "naïve café — 日本語 🙂\t\r\n", "x<|im_start|>user\nhi<|im_end|>\n<|endoftext|>y"]:
                ids = enc.encode(s)
                self.assertEqual(enc.decode(ids), s)
            ids = enc.encode("<|im_start|>")
            self.assertEqual(ids, [len(enc.vocab) + 1])    # specials follow bytes + merges, in order
            self.assertLess(len(enc.encode(text)), len(text.encode()) // 2)


class Train(unittest.TestCase):
    SHAPE = ["--hidden", "32", "--ffn", "64", "--layers", "4", "--heads", "2", "--kv-heads", "1",
             "--head-dim", "16", "--lin-k-heads", "1", "--lin-v-heads", "2", "--lin-k-dim", "16", "--lin-v-dim", "16"]

    def run_train(self, data, out, steps, shape=None, extra=()):
        train.main(["--data", data, "--out", out, "--steps", str(steps), "--decay-start", "2", "--warmup", "1",
                    "--batch", "2", "--seq", "16", "--eval-every", "2", "--eval-windows", "2"] + (shape or self.SHAPE)
                   + list(extra))
        return torch.load(os.path.join(out, "ckpt.pt"))

    def test_shape_resume(self):
        with tempfile.TemporaryDirectory() as d:
            rng = np.random.default_rng(3)
            rng.integers(0, 4096, 3000).astype("<u2").tofile(os.path.join(d, "train.u16"))
            rng.integers(0, 4096, 200).astype("<u2").tofile(os.path.join(d, "heldout.u16"))
            whole = self.run_train(d, os.path.join(d, "whole"), 4)
            self.assertEqual(whole["step"], 4)
            self.assertEqual((whole["config"]["hidden_size"], whole["config"]["num_hidden_layers"],
                              whole["config"]["linear_num_value_heads"]), (32, 4, 2))
            self.assertEqual(tuple(whole["model"]["model.layers.0.linear_attn.in_proj_qkv.weight"].shape), (64, 32))
            part = os.path.join(d, "part")
            self.assertEqual(self.run_train(d, part, 4, extra=["--stop-at", "3"])["step"], 3)
            resumed = self.run_train(d, part, 4)
            for k, v in whole["model"].items():
                self.assertTrue(torch.equal(v, resumed["model"][k]), k)
            # grow the 4-layer run to 8 layers: same function, and --init trains from it
            state, cfg = grow.grow(whole["model"], whole["config"], 8)
            old, new = Qwen35MTP(whole["config"]), Qwen35MTP(cfg)
            old.load_state_dict(whole["model"])
            new.load_state_dict(state)
            self.assertEqual(new.model.layers[7].kind, "full_attention")
            self.assertEqual(new.model.layers[4].mlp.down_proj.weight.abs().max().item(), 0.0)
            ids = torch.randint(0, 4096, (2, 20), generator=torch.Generator().manual_seed(4))
            with torch.no_grad():
                (lo, ho), (ln, hn) = old(ids), new(ids)
                self.assertTrue(torch.equal(lo, ln))
                self.assertTrue(torch.equal(old.mtp_forward(ids, ho)[0], new.mtp_forward(ids, hn)[0]))
            init = os.path.join(d, "grown.pt")
            torch.save({"model": state, "config": cfg, "step": 0}, init)
            deep = list(self.SHAPE)
            deep[5] = "8"
            train.main(["--data", d, "--out", os.path.join(d, "deep"), "--init", init, "--steps", "1",
                        "--batch", "2", "--seq", "16"] + deep)
            st = torch.load(os.path.join(d, "deep", "ckpt.pt"))
            self.assertEqual(st["step"], 1)
            moved = (st["model"]["model.layers.4.mlp.down_proj.weight"]).abs().max().item()
            self.assertGreater(moved, 0.0)                  # the new layers learn
            self.assertLess(moved, 0.01)                    # from the grown start, not a random one
            with self.assertRaises(ValueError):
                grow.grow(whole["model"], whole["config"], 6)
            other = list(self.SHAPE)
            other[1] = "48"
            with self.assertRaises(SystemExit):
                self.run_train(d, part, 5, other)

    def test_distill_trains_only_the_mtp_block(self):
        """--distill: every trunk and embedding tensor stays bit-identical, every MTP tensor moves, and
        the MTP rows get closer to the frozen trunk's distribution (the loss it optimises)."""
        with tempfile.TemporaryDirectory() as d:
            rng = np.random.default_rng(5)
            # a learnable stream (a repeated random phrase) so the trunk has a distribution worth copying
            np.tile(rng.integers(0, 4096, 40), 80).astype("<u2").tofile(os.path.join(d, "train.u16"))
            rng.integers(0, 4096, 200).astype("<u2").tofile(os.path.join(d, "heldout.u16"))
            base = self.run_train(d, os.path.join(d, "base"), 40, extra=["--lr", "1e-2", "--decay-start", "40"])
            init = os.path.join(d, "base", "ckpt.pt")
            dist = os.path.join(d, "dist")
            train.main(["--data", d, "--out", dist, "--init", init, "--distill", "--distill-chain", "2", "--steps", "30", "--lr", "3e-3",
                        "--warmup", "1", "--batch", "2", "--seq", "16", "--eval-every", "100"] + self.SHAPE)
            after = torch.load(os.path.join(dist, "ckpt.pt"))
            for k, v in base["model"].items():
                same = torch.equal(v, after["model"][k])
                self.assertEqual(same, not k.startswith("mtp."), k)
            ids = torch.from_numpy(np.fromfile(os.path.join(d, "train.u16"), dtype="<u2")[:65].astype(np.int64))[None]
            kl = []
            for st in (base, after):
                m = Qwen35MTP(st["config"])
                m.load_state_dict(st["model"])
                with torch.no_grad():
                    logits, h = m(ids)
                    mlogits, _ = m.mtp_forward(ids, h)
                    p = F.log_softmax(logits, -1)
                    kl.append((p.exp() * (p - F.log_softmax(mlogits, -1))).sum(-1).mean().item())
            self.assertLess(kl[1], 0.5 * kl[0])


if __name__ == "__main__":
    unittest.main()
