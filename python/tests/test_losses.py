"""The reference trainer's losses (creditflow.learn.losses): GAE's known values, the clip
anchored on the policy before the update, the truncated importance weight, the critic, and the
error for a batch without the field its loss needs."""

import os
import unittest

import numpy as np

try:
    import torch
except ImportError:  # the package works without torch; these tests need it
    torch = None

if torch is not None:
    from creditflow.learn import losses as L

START = os.path.join(os.path.dirname(__file__), "..", "creditflow", "learn", "start")


def sample(tid, tokens, mask, adv=None, rewards=None, lp=None):
    f32 = lambda x: None if x is None else np.array(x, dtype=np.float32)
    return {"trajectory_id": tid, "prompt_id": "p", "method": "attnsr", "output": "token_rewards",
            "tokens": np.array(tokens, dtype=np.int32), "loss_mask": np.array(mask, dtype=np.int8),
            "advantages": f32(adv), "token_rewards": f32(rewards), "rollout_logprobs": f32(lp),
            "temperature": 1.0, "policy_version": 0, "reward": 0.0, "outcome_advantage": 0.0}


@unittest.skipIf(torch is None, "needs torch (Debian: python3-torch)")
class GAE(unittest.TestCase):
    def test_known_values_over_policy_tokens_only(self):
        # policy tokens at 1, 2, 4 (3 is an observation): rewards 0, 0.5, 1; values 0.1, 0.2, 0.3
        r = torch.tensor([[0.0, 0.0, 0.5, 9.0, 1.0]])
        v = torch.tensor([[7.0, 0.1, 0.2, 7.0, 0.3]])
        m = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]])
        adv, ret = L.gae(r, v, m, gamma=1.0, lam=0.5)
        d = [0 + 0.2 - 0.1, 0.5 + 0.3 - 0.2, 1 - 0.3]
        a2 = d[2]
        a1 = d[1] + 0.5 * a2
        a0 = d[0] + 0.5 * a1
        want = torch.tensor([[0, a0, a1, 0, a2]])
        self.assertTrue(torch.allclose(adv, want, atol=1e-6), (adv, want))
        self.assertTrue(torch.allclose(ret, (want + v) * m, atol=1e-6))
        # λ = 1, γ = 1: the advantage is the return to go minus the value
        adv, _ = L.gae(r, v, m, gamma=1.0, lam=1.0)
        self.assertTrue(torch.allclose(adv[0, [1, 2, 4]], torch.tensor([1.5 - 0.1, 1.5 - 0.2, 1 - 0.3]), atol=1e-6))


    def test_rewards_at_end_moves_the_step_rewards_onto_the_terminal_token(self):
        # step rewards 0.2 and −0.05 on two moves, the terminal reward 1 on the last policy
        # token (index 5); index 6 is padding, index 3 an observation holding a stray value
        r = torch.tensor([[0.0, 0.2, 0.0, 7.0, -0.05, 1.0, 3.0], [0.0] * 7])
        m = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0], [0.0] * 7])
        out = L.rewards_at_end(r, m)
        want = torch.tensor([[0, 0, 0, 0, 0, 1.15, 0], [0.0] * 7])
        self.assertTrue(torch.allclose(out, want, atol=1e-6), out)
        # with λ = γ = 1 and zero values the first token's advantage is the same either way
        # (the sum is kept); with λ < 1 the moved rewards reach it only through the decay
        v = torch.zeros_like(r)
        a_spread, _ = L.gae(r * m, v, m, gamma=1.0, lam=1.0)
        a_end, _ = L.gae(out, v, m, gamma=1.0, lam=1.0)
        self.assertAlmostEqual(float(a_spread[0, 1]), float(a_end[0, 1]), places=6)
        a_spread, _ = L.gae(r * m, v, m, gamma=1.0, lam=0.5)
        a_end, _ = L.gae(out, v, m, gamma=1.0, lam=0.5)
        self.assertAlmostEqual(float(a_end[0, 1]), 1.15 * 0.5 ** 3, places=6)
        self.assertAlmostEqual(float(a_spread[0, 1]), 0.2 + 0.5 ** 2 * -0.05 + 0.5 ** 3 * 1.0, places=6)


@unittest.skipIf(torch is None, "needs torch (Debian: python3-torch)")
class Fields(unittest.TestCase):
    def test_missing_field_is_named(self):
        s = sample("t-1", [1, 2, 3], [0, 1, 1], rewards=[0, 0, 1])
        L.check_fields([s], "ppo")
        with self.assertRaises(L.MissingField) as cm:
            L.check_fields([s], "pg")
        self.assertIn("advantages", str(cm.exception))
        self.assertIn("t-1", str(cm.exception))
        s2 = sample("t-2", [1, 2, 3], [0, 1, 1], adv=[0, 1, 1])
        with self.assertRaises(L.MissingField) as cm:
            L.check_fields([s2], "ppo")
        self.assertIn("token_rewards", str(cm.exception))


@unittest.skipIf(torch is None, "needs torch (Debian: python3-torch)")
class PolicyLoss(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        from creditflow import policy as P
        self.model = P.load(START)
        ids = [list(b"ab<search>atlas</search>xyz") for _ in range(2)]
        mask = [[0] * 2 + [1] * 22 + [0] * 3 for _ in range(2)]
        self.batch = [sample("t%d" % i, ids[i], mask[i], adv=[1.0 if i == 0 else -1.0] * len(ids[i])) for i in range(2)]

    def test_first_step_has_ratio_one(self):
        b = L.Batch(self.batch)
        with torch.no_grad():
            old, _ = L.logprobs_entropy(self.model, b)
        loss, d = L.policy_loss(self.model, b, old, b.adv, clip=0.2, is_cap=2.0)
        self.assertEqual(d["clip_fraction"], 0.0)
        self.assertGreater(d["entropy"], 0.0)
        # without rollout log-probs the weight is 1 and nothing is truncated
        self.assertEqual(d["is_truncated"], 0.0)
        self.assertAlmostEqual(d["approx_kl"], 0.0, places=6)
        # equal and opposite advantages on the same tokens: the loss is 0 at ratio 1
        self.assertAlmostEqual(float(loss), 0.0, places=6)

    def test_truncated_weight_against_mu(self):
        b = L.Batch(self.batch)
        with torch.no_grad():
            old, _ = L.logprobs_entropy(self.model, b)
        # μ gave every token a log-prob 5 below π_old: weights exp(5) truncated at 2
        for s, o in zip(self.batch, old):
            lp = np.zeros(len(s["tokens"]), dtype=np.float32)
            lp[1:] = (o.numpy() - 5.0)
            s["rollout_logprobs"] = lp * (s["loss_mask"] > 0)
        b = L.Batch(self.batch)
        _, d = L.policy_loss(self.model, b, old, b.adv, clip=0.2, is_cap=2.0)
        self.assertEqual(d["is_truncated"], 1.0)
        self.assertAlmostEqual(d["approx_kl"], float(np.exp(5) - 1 - 5), places=2)

    def test_critic_starts_at_zero_and_learns(self):
        c = L.Critic(START)
        b = L.Batch(self.batch)
        v = c.values(b.ids).detach()
        self.assertEqual(float(v.abs().max()), 0.0)
        returns = torch.ones_like(v) * b.mask
        opt = torch.optim.Adam(c.parameters(), lr=1e-2)
        first = float(L.value_loss(c, b, returns))
        for _ in range(20):
            vl = L.value_loss(c, b, returns)
            opt.zero_grad()
            vl.backward()
            opt.step()
        self.assertAlmostEqual(first, 0.5, places=6)
        self.assertLess(float(vl), 0.1)


if __name__ == "__main__":
    unittest.main()
