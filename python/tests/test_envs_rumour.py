"""The rumour world's rules (creditflow.envs.Rumour, docs/learn.md "The rumour world"): six
searches among twelve sources, then the answer; only the atlas names the gold answer; the three
rumour sources name one wrong name, in the atlas's own sentences; the episode records its key
and harmful turns; the reward is 1 exactly for the gold name; episodes are deterministic."""

import random
import unittest

from creditflow import envs as E


class RumourRules(unittest.TestCase):
    def setUp(self):
        self.env = E.make_env("rumour")

    def play(self, seed, queries, answer=None):
        ep = self.env.reset(seed)
        obs = [self.env.step(ep, self.env.format_query(q)) for q in queries]
        while self.env.phase(ep) == "info":
            obs.append(self.env.step(ep, "<search>nothing</search>"))
        self.env.step(ep, self.env.format_answer(ep, ep.gold if answer is None else answer))
        return ep, obs

    def test_shape(self):
        self.assertEqual(len(self.env.options), 12)
        self.assertEqual(len(set(o[0] for o in self.env.options)), 12)  # distinct first letters
        self.assertEqual(sorted(self.env.rumours), ["blog", "chat", "forum"])
        self.assertNotIn(self.env.reliable, self.env.rumours)
        ep, _ = self.play(1, [])
        self.assertEqual([k for k, _, _ in ep.turns], ["search"] * 6 + ["answer"])
        for o in self.env.options:
            self.assertIn(o, ep.prompt)

    def test_who_says_what(self):
        for seed in range(100):
            ep, obs = self.play(seed, self.env.options[:6])
            ep2, obs2 = self.play(seed, self.env.options[6:])
            self.assertNotEqual(ep.wrong, ep.gold)
            self.assertIn(ep.wrong, E.NAMES)
            for q, o in zip(self.env.options, obs + obs2):
                self.assertEqual(ep.gold in o, q == "atlas", (seed, q, o))
                self.assertEqual(ep.wrong in o, q in self.env.rumours, (seed, q, o))
            # a rumour is the atlas's sentence with the other name
            atlas, blog = obs[0], obs[1]
            self.assertRegex(atlas, r"^<information>[a-z ]+, [a-z ]+ is also called [A-Z]+\.</information>$")
            self.assertRegex(blog, r"^<information>[a-z ]+, [a-z ]+ is also called [A-Z]+\.</information>$")
            self.assertEqual(atlas.split(", ", 1)[1].replace(ep.gold, "X"), blog.split(", ", 1)[1].replace(ep.wrong, "X"))
            self.assertNotIn(ep.gold, ep.prompt)
            self.assertNotIn(ep.wrong, ep.prompt)

    def test_labels(self):
        ep, _ = self.play(7, ["news", "blog", "atlas", "forum", "atlas", "tabloid"])
        self.assertEqual(ep.key_turns, [2, 4])
        self.assertEqual(ep.harmful_turns, [1, 3])
        ep, _ = self.play(7, ["<bad", "wiki"])
        self.assertEqual((ep.key_turns, ep.harmful_turns), ([], []))

    def test_reward(self):
        ep, _ = self.play(3, ["blog", "atlas"])
        self.assertEqual((ep.reward, ep.correct), (1.0, True))
        ep, _ = self.play(3, ["blog", "atlas"], answer=self.env.reset(3).wrong)
        self.assertEqual((ep.reward, ep.correct), (0.0, False))
        ep = self.env.reset(3)
        for _ in range(6):
            self.env.step(ep, "<search>atlas</search>")
        self.env.step(ep, "no answer tags")
        self.assertEqual(ep.reward, 0.0)
        with self.assertRaises(ValueError):
            self.env.step(ep, "<search>atlas</search>")

    def test_deterministic_and_same_question_as_searchqa(self):
        a, oa = self.play(11, ["chat", "atlas", "memo"])
        b, ob = self.play(11, ["chat", "atlas", "memo"])
        self.assertEqual((a.prompt, a.gold, a.wrong, oa), (b.prompt, b.gold, b.wrong, ob))
        s = E.make_env("searchqa").reset(11)
        self.assertEqual((a.gold, a.subject), (s.gold, s.subject))

    def test_random_policy(self):
        # six uniform searches among twelve: the atlas in 1 - (11/12)^6, a rumour in 1 - (9/12)^6
        rng, found, rumour = random.Random(5), 0, 0
        n = 4000
        for seed in range(n):
            ep = self.env.reset(seed)
            while self.env.phase(ep) == "info":
                self.env.step(ep, self.env.format_query(rng.choice(self.env.options)))
            found += bool(ep.key_turns)
            rumour += bool(ep.harmful_turns)
        self.assertAlmostEqual(found / n, 1 - (11 / 12) ** 6, delta=0.03)
        self.assertAlmostEqual(rumour / n, 1 - (9 / 12) ** 6, delta=0.03)

    def test_oracle(self):
        for seed in range(50):
            ep = self.env.reset(seed)
            while self.env.phase(ep) != "done":
                self.env.step(ep, self.env.oracle_action(ep))
            self.assertTrue(ep.correct)
            self.assertEqual(ep.harmful_turns, [])


if __name__ == "__main__":
    unittest.main()
