"""The longer household world's rules (creditflow.envs.LongHousehold, docs/learn.md): the desk
opens only in the office and only it shows the code; the two old notes name one wrong code;
ten moves, then the unlock; the episode knows its key, enabling and harmful turns; the oracle
always succeeds and random moves rarely find the code."""

import random
import unittest

from creditflow import envs as E


class LongHouseholdRules(unittest.TestCase):
    def setUp(self):
        self.env = E.make_env("household-long")

    def play(self, seed, moves, answer=None):
        ep = self.env.reset(seed)
        obs = []
        for m in moves:
            obs.append(self.env.step(ep, self.env.format_query(m)))
        while self.env.phase(ep) == "info":
            obs.append(self.env.step(ep, "wait\n"))
        self.env.step(ep, self.env.format_answer(ep, answer or ep.gold))
        return ep, obs

    def test_eleven_steps(self):
        ep, _ = self.play(1, [])
        self.assertEqual(len(ep.turns), 11)
        self.assertEqual([k for k, _, _ in ep.turns], ["tool"] * 10 + ["answer"])
        self.assertEqual(self.env.phase(ep), "done")

    def test_desk_opens_only_in_the_office(self):
        for room in ["hall", "kitchen", "bedroom"]:
            ep, obs = self.play(2, ["go to " + room, "open desk"])
            self.assertEqual(obs[1], "there is no desk here.\n")
            self.assertNotIn(ep.gold, "".join(obs))
            self.assertEqual(ep.key_turns, [])
        ep, obs = self.play(2, ["open desk", "go to office", "open desk"])
        self.assertEqual(obs[0], "there is no desk here.\n")  # the episode starts in the hall
        self.assertIn("code is %s." % ep.gold, obs[2])
        self.assertEqual((ep.key_turns, ep.enabling_turns), ([2], [1]))

    def test_only_the_desk_shows_the_code(self):
        for seed in range(100):
            ep0 = self.env.reset(seed)
            for room, places in self.env.rooms.items():
                for p in places:
                    ep, obs = self.play(seed, ["go to " + room, "open " + p])
                    self.assertEqual(ep.gold in "".join(obs), p == "desk", (seed, p))
                    self.assertEqual(ep.key_turns, [1] if p == "desk" else [])
                    self.assertEqual(ep.harmful_turns, [1] if p in ("drawer", "cabinet") else [])
            self.assertNotIn(ep0.gold, ep0.prompt)

    def test_old_notes_name_one_wrong_code(self):
        for seed in range(200):
            ep, obs = self.play(seed, ["go to bedroom", "open drawer", "go to kitchen", "open cabinet"], answer="X")
            self.assertNotEqual(ep.wrong, ep.gold)
            self.assertIn(ep.wrong, E.NAMES)
            self.assertIn("old note: the %s code was %s." % (ep.box, ep.wrong), obs[1])
            self.assertIn("code was %s." % ep.wrong, obs[3])
            self.assertEqual(ep.harmful_turns, [1, 3])
            self.assertEqual(ep.reward, 0.0)

    def test_reward_is_one_exactly_for_the_code(self):
        ep, _ = self.play(5, ["go to office", "open desk"])
        self.assertEqual((ep.correct, ep.reward), (True, 1.0))
        ep, _ = self.play(5, ["go to office", "open desk"], answer=self.env.reset(5).gold.lower())
        self.assertEqual(ep.reward, 0.0)
        # copying the old note fails
        ep = self.env.reset(5)
        self.env.step(ep, "go to bedroom\n")
        self.env.step(ep, "open drawer\n")
        while self.env.phase(ep) == "info":
            self.env.step(ep, "nothing\n")
        self.env.step(ep, self.env.format_answer(ep, ep.wrong))
        self.assertEqual(ep.reward, 0.0)

    def test_malformed_moves_change_nothing(self):
        ep = self.env.reset(3)
        for bad in ["", "go to", "go to garden", "open", "open moon", "open desk please", "unlock safe with A"]:
            self.assertEqual(self.env.step(ep, bad), "nothing happens.\n")
        self.assertEqual(ep.room, "hall")
        self.assertEqual(ep.key_turns, [])

    def test_deterministic_in_the_seed(self):
        a, oa = self.play(9, ["go to kitchen", "open fridge", "go to office", "open shelf"])
        b, ob = self.play(9, ["go to kitchen", "open fridge", "go to office", "open shelf"])
        self.assertEqual((a.prompt, a.gold, a.wrong, oa), (b.prompt, b.gold, b.wrong, ob))

    def test_oracle_succeeds_random_rarely_and_expert_copies_the_last_note(self):
        rng = random.Random(1)
        found = 0
        n = 2000
        for seed in range(n):
            ep = self.env.reset(seed)
            while self.env.phase(ep) != "done":
                self.env.step(ep, self.env.oracle_action(ep) if seed < 50 else self.env.expert_action(ep, rng))
            if seed < 50:
                self.assertEqual(ep.reward, 1.0)
                self.assertEqual(ep.key_turns, [1])
                continue
            found += bool(ep.key_turns)
            last = max(ep.key_turns + ep.harmful_turns) if ep.key_turns or ep.harmful_turns else None
            if last is not None:  # the expert copies the last note it saw
                self.assertEqual(ep.correct, last in ep.key_turns, seed)
        # random moves find the desk in a minority of episodes (0.14 with these seeds)
        self.assertGreater(found / (n - 50), 0.05)
        self.assertLess(found / (n - 50), 0.3)


if __name__ == "__main__":
    unittest.main()
