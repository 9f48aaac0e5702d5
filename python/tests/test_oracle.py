"""The oracle-credit arm (creditflow.learn.oracle, docs/learn.md "The oracle-credit arm"): the
term lands on the action tokens of exactly the labelled turns, +λ on key and enabling turns, −λ
on harmful ones, 0 elsewhere (with the ppo loss: on each labelled turn's last action token, in
the token rewards); the labels travel from the worker to the trainer through the run
folder; a sample whose turns cannot be mapped, or that has no labels, is an error."""

import os
import tempfile
import unittest

import numpy as np

from creditflow import envs as E
from creditflow import policy as P
from creditflow.learn import oracle as O
from creditflow.learn import rollout

LAM = 0.5


def sample_of(env, ep, texts):
    """The sample the processor makes of a played episode: the trajectory the worker publishes
    (rollout.to_trajectory), laid out as docs/wire-format.md's Sample: the prompt, then each
    turn's action and observation; loss_mask 1 exactly on the actions; one diagnostic per turn."""
    turns = []
    for (kind, _, obs), text in zip(ep.turns, texts):
        ids = P.encode(text)
        turns.append((kind, ids, [0.0] * len(ids), P.encode(obs) if obs else []))
    t = rollout.to_trajectory(env, ep, turns, trajectory_id="t-0", prompt_id="p", group_size=1, sample_index=0,
                              policy_version=0, temperature=1.0)
    toks, mask = [np.asarray(t["prompt"])], [np.zeros(len(t["prompt"]), np.uint8)]
    for tu in t["turns"]:
        toks += [tu["action"], tu["observation"]]
        mask += [np.ones(len(tu["action"]), np.uint8), np.zeros(len(tu["observation"]), np.uint8)]
    return {"trajectory_id": "t-0", "tokens": np.concatenate(toks).astype(np.int32), "loss_mask": np.concatenate(mask),
            "turns": [{"kind": k} for k, _, _ in ep.turns]}


def play(env, seed, actions):
    ep = env.reset(seed)
    for a in actions:
        env.step(ep, a)
    return ep


class Spans(unittest.TestCase):
    def test_runs_of_the_mask(self):
        self.assertEqual(O.turn_spans([0, 0, 1, 1, 0, 1, 0, 0, 1]), [(2, 4), (5, 6), (8, 9)])
        self.assertEqual(O.turn_spans([1, 0]), [(0, 1)])
        self.assertEqual(O.turn_spans([0, 0]), [])


class Term(unittest.TestCase):
    def test_rumour_episode(self):
        env = E.make_env("rumour")
        q = ["blog", "atlas", "news", "chat", "atlas", "memo"]  # rumour, key, prose, rumour, key, prose
        ep = play(env, 7, [env.format_query(x) for x in q] + ["<answer>X</answer>"])
        self.assertEqual((ep.key_turns, ep.harmful_turns), ([1, 4], [0, 3]))
        texts = [a for _, a, _ in ep.turns]
        s = sample_of(env, ep, texts)
        term = O.oracle_term(s, O.labels_of(ep), LAM)
        spans = O.turn_spans(s["loss_mask"])
        self.assertEqual(len(spans), 7)
        want = {0: -LAM, 1: LAM, 2: 0.0, 3: -LAM, 4: LAM, 5: 0.0, 6: 0.0}
        covered = np.zeros(len(term), bool)
        for k, (a, b) in enumerate(spans):
            # the span is turn k's action, byte for byte
            self.assertEqual(P.decode(s["tokens"][a:b].tolist()), texts[k])
            np.testing.assert_array_equal(term[a:b], np.full(b - a, want[k], np.float32), err_msg="turn %d" % k)
            covered[a:b] = True
        self.assertTrue((term[~covered] == 0).all())  # prompt and observations: nothing
        n = lambda k: spans[k][1] - spans[k][0]
        self.assertAlmostEqual(float(term.sum()), LAM * (n(1) + n(4) - n(0) - n(3)), places=5)

    def test_household_long_enabling_is_positive(self):
        env = E.make_env("household-long")
        moves = ["open drawer", "go to bedroom", "open drawer", "go to office", "open desk", "open shelf",
                 "go to hall", "go to office", "open desk", "go to kitchen"]
        ep = play(env, 3, [m + "\n" for m in moves] + ["unlock %s with X\n" % env.reset(3).box])
        self.assertEqual((ep.key_turns, ep.enabling_turns, ep.harmful_turns), ([4, 8], [3, 7], [2]))
        s = sample_of(env, ep, [a for _, a, _ in ep.turns])
        term = O.oracle_term(s, O.labels_of(ep), 0.25)
        spans = O.turn_spans(s["loss_mask"])
        signs = [float(np.sign(term[a:b]).mean()) for a, b in spans]
        self.assertEqual(signs, [0, 0, -1, 1, 1, 0, 0, 1, 1, 0, 0])
        self.assertEqual(set(np.unique(term).tolist()), {-0.25, 0.0, 0.25})

    def test_household_long_step_rewards_on_last_action_token(self):
        # the ppo loss: ±λ on the last action token of each labelled turn only
        env = E.make_env("household-long")
        moves = ["open drawer", "go to bedroom", "open drawer", "go to office", "open desk", "open shelf",
                 "go to hall", "go to office", "open desk", "go to kitchen"]
        ep = play(env, 3, [m + "\n" for m in moves] + ["unlock %s with X\n" % env.reset(3).box])
        s = sample_of(env, ep, [a for _, a, _ in ep.turns])
        r = O.oracle_step_rewards(s, O.labels_of(ep), 0.25)
        spans = O.turn_spans(s["loss_mask"])
        want = {2: -0.25, 3: 0.25, 4: 0.25, 7: 0.25, 8: 0.25}
        self.assertEqual(r.dtype, np.float32)
        self.assertEqual(int((r != 0).sum()), len(want))
        for k, (a, b) in enumerate(spans):
            self.assertEqual(float(r[b - 1]), want.get(k, 0.0), "turn %d" % k)
            self.assertTrue((r[a:b - 1] == 0).all())
        self.assertAlmostEqual(float(r.sum()), 0.25 * 3)
        with self.assertRaises(O.MissingLabels):
            O.oracle_step_rewards(dict(s, loss_mask=np.ones_like(s["loss_mask"])), O.labels_of(ep), 0.25)

    def test_paid_once(self):
        # --oracle-once: the first desk opening, the walk into the office just before it, every
        # old note; walks in and out and second openings are not paid
        env = E.make_env("household-long")
        moves = ["go to office", "go to hall", "open drawer", "go to office", "open desk", "open shelf",
                 "go to hall", "go to office", "open desk", "go to kitchen"]
        ep = play(env, 3, [m + "\n" for m in moves] + ["unlock %s with X\n" % env.reset(3).box])
        lab = O.labels_of(ep)
        self.assertEqual((lab["key_turns"], lab["enabling_turns"]), ([4, 8], [0, 3, 7]))
        got = O.once(lab)
        self.assertEqual((got["key_turns"], got["enabling_turns"], got["harmful_turns"]), ([4], [3], lab["harmful_turns"]))
        self.assertEqual(lab["enabling_turns"], [0, 3, 7])  # the world's labels are left as they are
        s = sample_of(env, ep, [a for _, a, _ in ep.turns])
        r = O.oracle_step_rewards(s, got, 0.25)
        spans = O.turn_spans(s["loss_mask"])
        self.assertEqual([k for k, (a, b) in enumerate(spans) if r[b - 1] > 0], [3, 4])
        # no key turn: no enabling turn is paid either
        none = O.once(dict(lab, key_turns=[]))
        self.assertEqual((none["key_turns"], none["enabling_turns"]), ([], []))
        # an enabling turn after the first key turn only: not paid
        self.assertEqual(O.once(dict(lab, enabling_turns=[7]))["enabling_turns"], [])

    def test_played_episodes_of_the_start_policy(self):
        env = E.make_env("rumour")
        model = P.load(os.path.join(os.path.dirname(O.__file__), "start-rumour"))
        import torch
        played = rollout.play(model, env, [11, 12, 13, 14], generator=torch.Generator().manual_seed(1))
        for ep, turns in played:
            s = sample_of(env, ep, [P.decode(ids) for _, ids, _, _ in turns])
            term = O.oracle_term(s, O.labels_of(ep), LAM)
            spans = O.turn_spans(s["loss_mask"])
            for k, (a, b) in enumerate(spans):
                self.assertEqual(s["tokens"][a:b].tolist(), list(turns[k][1]))
                w = LAM * ((k in ep.key_turns) - (k in ep.harmful_turns))
                self.assertTrue((term[a:b] == np.float32(w)).all(), (k, term[a:b], w))

    def test_unmappable_sample_is_an_error(self):
        env = E.make_env("rumour")
        ep = play(env, 1, ["<search>atlas</search>"] * 6 + ["<answer>X</answer>"])
        s = sample_of(env, ep, [a for _, a, _ in ep.turns])
        lab = O.labels_of(ep)
        bad = dict(s, loss_mask=np.ones_like(s["loss_mask"]))  # one run for seven turns
        with self.assertRaises(O.MissingLabels) as cm:
            O.oracle_term(bad, lab, LAM)
        self.assertIn("t-0", str(cm.exception))
        with self.assertRaises(O.MissingLabels):
            O.oracle_term(s, dict(lab, harmful_turns=[9]), LAM)
        for labels in (dict(lab, harmful_turns=[9]), dict(lab, turns=3)):  # the trainer's check, the same refusals
            with self.assertRaises(O.MissingLabels):
                O.check_labels(s, labels)
        O.check_labels(s, lab)


class Trainer(unittest.TestCase):
    def test_term_is_added_to_the_shifted_advantages(self):
        import torch
        from creditflow.learn import losses as L
        from creditflow.learn import trainer as T
        env = E.make_env("rumour")
        eps = [play(env, 5, ["<search>%s</search>" % q for q in qs] + ["<answer>X</answer>"])
               for qs in (["chat", "atlas", "wiki", "wiki", "wiki", "wiki"], ["wiki"] * 6)]
        batch = []
        with tempfile.TemporaryDirectory() as d:
            w = O.LabelWriter(os.path.join(d, "worker-0-0.jsonl"))
            for i, ep in enumerate(eps):
                s = sample_of(env, ep, [a for _, a, _ in ep.turns])
                s.update(trajectory_id="t-%d" % i, prompt_id="p", temperature=1.0, policy_version=0, reward=0.0,
                         outcome_advantage=0.3 - 0.6 * i, rollout_logprobs=None, token_rewards=None,
                         advantages=((0.3 - 0.6 * i) * s["loss_mask"]).astype(np.float32))
                w.write(s["trajectory_id"], ep)
                batch.append(s)
            w.close()
            b = L.Batch(batch)
            before = b.adv.clone()
            info = T.add_oracle(b, batch, O.LabelReader(d), LAM)
        spans = O.turn_spans(batch[0]["loss_mask"])
        (a0, b0), (a1, b1) = spans[0], spans[1]
        # row 0: the rumour turn −λ, the atlas turn +λ, shifted by one (position j predicts token j+1)
        d0 = (b.adv - before)[0]
        self.assertTrue(torch.allclose(d0[a0 - 1:b0 - 1], torch.full((b0 - a0,), -LAM)))
        self.assertTrue(torch.allclose(d0[a1 - 1:b1 - 1], torch.full((b1 - a1,), LAM)))
        self.assertEqual(float(d0.abs().sum()), LAM * ((b0 - a0) + (b1 - a1)))
        self.assertEqual(float((b.adv - before)[1].abs().sum()), 0.0)  # no labelled turn: GRPO's advantages
        self.assertEqual(info, {"oracle_key_turns": 1, "oracle_enabling_turns": 0, "oracle_harmful_turns": 1,
                                "oracle_tokens_plus": b1 - a1, "oracle_tokens_minus": b0 - a0})


    def test_step_rewards_are_added_to_the_shifted_token_rewards(self):
        # the ppo loss: the oracle's step rewards join PPO's terminal reward before GAE; the
        # advantages are left alone
        import torch
        from creditflow.learn import losses as L
        from creditflow.learn import trainer as T
        env = E.make_env("rumour")
        ep = play(env, 5, ["<search>%s</search>" % q for q in ["chat", "atlas", "wiki", "wiki", "wiki", "wiki"]]
                  + ["<answer>X</answer>"])
        with tempfile.TemporaryDirectory() as d:
            w = O.LabelWriter(os.path.join(d, "worker-0-0.jsonl"))
            s = sample_of(env, ep, [a for _, a, _ in ep.turns])
            tr = np.zeros(len(s["loss_mask"]), np.float32)
            last = O.turn_spans(s["loss_mask"])[-1][1] - 1
            tr[last] = 1.0  # the terminal reward on the last policy token
            s.update(trajectory_id="t-0", prompt_id="p", temperature=1.0, policy_version=0, reward=1.0,
                     outcome_advantage=0.0, rollout_logprobs=None, advantages=None, token_rewards=tr)
            w.write("t-0", ep)
            w.close()
            b = L.Batch([s])
            adv, before = b.adv.clone(), b.rewards.clone()
            info = T.add_oracle(b, [s], O.LabelReader(d), 0.25, "ppo")
        spans = O.turn_spans(s["loss_mask"])
        d0 = (b.rewards - before)[0]
        self.assertEqual(float(d0[spans[0][1] - 2]), -0.25)  # the rumour turn's last token, shifted by one
        self.assertEqual(float(d0[spans[1][1] - 2]), 0.25)  # the atlas turn's
        self.assertEqual(int((d0 != 0).sum()), 2)
        self.assertTrue(torch.equal(b.adv, adv))
        self.assertEqual(float(b.rewards[0, last - 1]), 1.0)  # the terminal reward stays
        self.assertEqual(info, {"oracle_key_turns": 1, "oracle_enabling_turns": 0, "oracle_harmful_turns": 1,
                                "oracle_tokens_plus": 1, "oracle_tokens_minus": 1})


class Files(unittest.TestCase):
    def test_writer_to_reader(self):
        env = E.make_env("rumour")
        ep = play(env, 2, ["<search>forum</search>", "<search>atlas</search>"] + ["<search>wiki</search>"] * 4
                  + ["<answer>X</answer>"])
        with tempfile.TemporaryDirectory() as d:
            r = O.LabelReader(d)
            with self.assertRaises(O.MissingLabels) as cm:
                r.get("a-1")
            self.assertIn("a-1", str(cm.exception))
            w = O.LabelWriter(os.path.join(d, "worker-0-0.jsonl"))
            w.write("a-1", ep)
            with open(os.path.join(d, "worker-1-0.jsonl"), "w") as f:
                f.write('{"trajectory_id": "b-1", "turns": 7, "key_turns": [], "harmful_turns": [2]}\n{"trajectory_id": "b-2"')
            got = r.get("a-1")  # written after the reader started: read on demand
            self.assertEqual((got["key_turns"], got["harmful_turns"], got["turns"]), ([1], [0], 7))
            self.assertEqual(r.get("b-1")["harmful_turns"], [2])
            with self.assertRaises(O.MissingLabels):
                r.get("b-2")  # a line still being written is not read
            with open(os.path.join(d, "worker-1-0.jsonl"), "a") as f:
                f.write(', "turns": 7, "key_turns": [3]}\n')
            self.assertEqual(r.get("b-2")["key_turns"], [3])
            w.close()


if __name__ == "__main__":
    unittest.main()
