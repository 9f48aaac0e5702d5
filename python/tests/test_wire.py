import unittest

import numpy as np

import creditflow
from creditflow import wire
from creditflow._avro import canonical_form

from .util import avro, avro_decode, avro_encode, sample_datum


class Fingerprints(unittest.TestCase):
    def test_legacy_fingerprints_are_the_published_ones(self):
        # docs/wire-format.md, pinned by the Go tests (TestPinnedFingerprints).
        want = {"Trajectory": "3ba0bd24c70af6b5", "Scored": "988295c3e1787e9c",
                "Sample": "accbea26abfb68c4", "DeadLetter": "d52182524e0dbca9"}
        for name, fp in want.items():
            self.assertEqual(wire.codec(name).writers[wire.LEGACY].fingerprint.hex(), fp, name)

    @unittest.skipIf(avro is None, "avro not installed")
    def test_canonical_form_matches_python3_avro(self):
        for name in ("Trajectory", "Scored", "Sample", "DeadLetter", "PolicyAnnouncement"):
            for gen in (None, wire.LEGACY):
                if gen and name == "PolicyAnnouncement":
                    continue
                ref = avro.schema.parse(wire.schema_text(name, gen)).canonical_form
                self.assertEqual(canonical_form(wire.schema_text(name, gen)), ref, (name, gen))

    def test_generations_differ_only_by_appended_fields(self):
        for name in ("Trajectory", "Sample"):
            c = wire.codec(name)
            self.assertNotEqual(c.current.fingerprint, c.writers[wire.LEGACY].fingerprint)


@unittest.skipIf(avro is None, "avro not installed")
class AgainstPython3Avro(unittest.TestCase):
    def test_sample_bytes_identical_both_generations(self):
        for current in (True, False):
            for ppo in (False, True):
                d = sample_datum(200, seed=3, current=current, ppo=ppo)
                gen = None if current else wire.LEGACY
                ref = avro_encode("Sample", d, gen)
                mine = wire.codec("Sample").encode(d, gen)
                self.assertEqual(mine, ref)

    def test_trajectory_bytes_identical(self):
        t = creditflow.build_trajectory(
            trajectory_id="t", prompt_id="p", group_size=2, sample_index=1, prompt_ids=[1, 2, 3],
            turns=[("search", [4, 5], [6, 7]), ("answer", [8])], policy_version=3, reward=0.5,
            gold_answers=["x"], tokenize=creditflow.byte_tokenizer, rollout_logprobs=[-0.5, -1, -2],
            temperature=0.7, created_at_ms=5)
        for writer, gen in ((wire.LEGACY, wire.LEGACY), (wire.CURRENT, None)):
            mine = creditflow.encode_trajectory(t, writer)
            datum = avro_decode("Trajectory", mine, gen)
            self.assertEqual(avro_encode("Trajectory", datum, gen), mine)
            self.assertEqual(datum["gold_span_start"], t["gold_span"][0])

    def test_old_sample_decodes_with_defaults(self):
        old = avro_encode("Sample", sample_datum(50, seed=9, current=False), wire.LEGACY)
        s = creditflow.decode_sample(old)
        self.assertIsNone(s["scorer_policy_version"])
        self.assertIsNone(s["source"])
        self.assertEqual(s["tokens"].size, 50)
        new = creditflow.decode_sample(avro_encode("Sample", sample_datum(50, seed=9)))
        self.assertEqual(new["scorer_policy_version"], 6)
        self.assertEqual(new["source"], "nq")
        np.testing.assert_array_equal(s["tokens"], new["tokens"])
        np.testing.assert_array_equal(s["advantages"], new["advantages"])

    def test_decoded_values_match_python3_avro(self):
        v = avro_encode("Sample", sample_datum(300, seed=4, ppo=True))
        ref = avro_decode("Sample", v)
        s = creditflow.decode_sample(v)
        self.assertEqual(s["tokens"].tobytes(), ref["tokens"])
        self.assertEqual(s["token_rewards"].tobytes(), ref["token_rewards"])
        self.assertIsNone(s["advantages"])
        self.assertEqual(s["turns"], ref["turns"])
        self.assertEqual(s["attnsr"], ref["attnsr"])


class Decoding(unittest.TestCase):
    def value(self, **kw):
        return wire.codec("Sample").encode(sample_datum(40, seed=2, **kw))

    def test_zero_copy(self):
        v = self.value()
        s = creditflow.decode_sample(v)
        whole = np.frombuffer(v, dtype=np.uint8)
        for f in ("tokens", "loss_mask", "advantages", "rollout_logprobs"):
            self.assertTrue(np.shares_memory(s[f], whole), f)
            self.assertFalse(s[f].flags.writeable)
        self.assertEqual(s["tokens"].dtype, np.dtype("<i4"))
        self.assertEqual(s["loss_mask"].dtype, np.uint8)

    def test_errors_carry_processor_reasons(self):
        v = self.value()
        cases = {
            "undecodable": [v[:5], b"\x00\x01" + v[2:], v[:-3], v + b"\x00"],
            "unknown_schema": [v[:2] + b"\x00" * 8 + v[10:],
                               wire.codec("Trajectory").header + v[10:]],
        }
        for reason, values in cases.items():
            for x in values:
                with self.assertRaises(creditflow.WireError) as cm:
                    creditflow.decode_sample(x)
                self.assertEqual(cm.exception.reason, reason, x[:12].hex())

    def test_huge_length_is_refused_before_allocating(self):
        v = bytearray(self.value())
        # trajectory_id's length varint sits right after the header: claim 2^40 bytes.
        v[10:11] = b"\x80\x80\x80\x80\x80\x40"
        with self.assertRaises(creditflow.WireError):
            creditflow.decode_sample(bytes(v))

    def test_misaligned_packed_field(self):
        d = sample_datum(10, seed=1)
        d["advantages"] = d["advantages"][:-1]
        with self.assertRaises(creditflow.WireError) as cm:
            creditflow.decode_sample(wire.codec("Sample").encode(d))
        self.assertEqual(cm.exception.reason, "undecodable")

    def test_policy_roundtrip(self):
        v = creditflow.encode_policy(12, "/ckpt/12", 99)
        self.assertEqual(creditflow.decode_policy(v), {"version": 12, "checkpoint": "/ckpt/12", "announced_at_ms": 99})
        self.assertEqual(wire.schema_of(v), "io.creditflow.v1.PolicyAnnouncement")
        with self.assertRaises(creditflow.WireError):
            creditflow.decode_sample(v)


class Encoding(unittest.TestCase):
    def traj(self, **kw):
        args = dict(trajectory_id="t", prompt_id="p", group_size=1, sample_index=0, prompt_ids=[1],
                    turns=[("answer", [2])], policy_version=0, reward=1.0, created_at_ms=1)
        args.update(kw)
        return creditflow.build_trajectory(**args)

    def test_auto_writer_picks_the_oldest_generation_that_holds_the_record(self):
        old = creditflow.encode_trajectory(self.traj())
        self.assertEqual(old[2:10], wire.codec("Trajectory").writers[wire.LEGACY].fingerprint)
        new = creditflow.encode_trajectory(self.traj(source="nq"))
        self.assertEqual(new[2:10], wire.codec("Trajectory").current.fingerprint)
        self.assertEqual(creditflow.decode_trajectory(new)["source"], "nq")
        self.assertIsNone(creditflow.decode_trajectory(old)["source"])
        with self.assertRaises(ValueError):
            creditflow.encode_trajectory(self.traj(source="nq"), wire.LEGACY)

    def test_deterministic(self):
        a = creditflow.encode_trajectory(self.traj(source="x"))
        b = creditflow.encode_trajectory(self.traj(source="x"))
        self.assertEqual(a, b)

    def test_roundtrip_numpy_inputs(self):
        t = self.traj(prompt_ids=np.array([5, 6, 7]), turns=[("search", np.array([1, 2]), np.array([3])),
                                                            ("answer", [9])],
                      rollout_logprobs=np.array([-1, -2, -3], dtype=np.float64))
        d = creditflow.decode_trajectory(creditflow.encode_trajectory(t))
        np.testing.assert_array_equal(d["prompt"], [5, 6, 7])
        np.testing.assert_array_equal(d["turns"][0]["observation"], [3])
        np.testing.assert_array_equal(d["rollout_logprobs"], [-1, -2, -3])


if __name__ == "__main__":
    unittest.main()


class ScoredGraphs(unittest.TestCase):
    """Scored records with compact step graphs (graphs) and of the generation before them
    (K×K in attention) both decode."""

    GOLDEN = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "schemas",
                                        "testdata", "v2", "scored_attnsr_groups.hex")

    GOLDEN_V3 = GOLDEN.replace("v2", "v3")

    def test_later_generation_fingerprint(self):
        self.assertEqual(wire.codec("Scored").writers["8017725"].fingerprint.hex(), "7ccadbc95ab7607d")
        self.assertEqual(wire.codec("Scored").writers["e4323a4"].fingerprint.hex(), "fe3c928b94decf4d")
        self.assertEqual(wire.codec("Scored").current.fingerprint.hex(), "0e4dc40f777a149a")

    @unittest.skipUnless(__import__("os").path.exists(GOLDEN_V3), "not run from a repository checkout")
    def test_golden_compact_pairs_decode(self):
        with open(self.GOLDEN_V3) as f:
            lines = f.read().split()
        self.assertGreater(len(lines), 10)
        for line in lines:
            r = wire.decode_scored(bytes.fromhex(line))
            k = len(r["trajectory"]["turns"])
            self.assertEqual(r["attention"], [])
            for g in r["graphs"]:
                self.assertIsNone(g["sum"])
                self.assertEqual(g["aa"].shape, (k * (k - 1) // 2,))
                self.assertEqual(g["ao"].shape, (k * (k - 1) // 2,))

    @unittest.skipUnless(__import__("os").path.exists(GOLDEN), "not run from a repository checkout")
    def test_golden_kxk_records_decode(self):
        with open(self.GOLDEN) as f:
            lines = f.read().split()
        for line in lines:
            r = wire.decode_scored(bytes.fromhex(line))
            k = len(r["trajectory"]["turns"])
            self.assertEqual(r["graphs"], [])
            self.assertTrue(r["attention"])
            for g in r["attention"]:
                self.assertEqual(g["aa"].shape, (k, k))

    def test_compact_record_roundtrip(self):
        k = 4
        aa = np.arange(k * (k - 1) // 2, dtype="<f8") / 10
        ao = aa / 2
        traj = wire.decode_trajectory(creditflow.encode_trajectory(_trajectory(k)))
        datum = {"trajectory": _plain(traj), "method": "attnsr", "direction": "", "turns": [],
                 "attention": [], "scorer_model": "m", "scorer_policy_version": 3, "truncations": 0,
                 "scored_at_ms": 1, "graphs": [{"layer": 8, "k": k, "aa": aa.tobytes(), "ao": ao.tobytes()}]}
        r = wire.decode_scored(wire.codec("Scored").encode(datum))
        g = r["graphs"][0]
        np.testing.assert_array_equal(g["aa"], aa)
        np.testing.assert_array_equal(g["ao"], ao)
        self.assertEqual(g["aa"][3 * 2 // 2 + 1], aa[4])  # entry [3, 1] at j(j-1)/2 + k
        self.assertIsNone(g["sum"])
        datum["graphs"][0]["aa"] = aa[:-1].tobytes()
        with self.assertRaises(wire.WireError):
            wire.decode_scored(wire.codec("Scored").encode(datum))
        # the sum form: only G_AA + G_AO
        datum["graphs"][0].update(aa=b"", ao=b"", sum=(aa + ao).tobytes())
        g = wire.decode_scored(wire.codec("Scored").encode(datum))["graphs"][0]
        self.assertIsNone(g["aa"])
        self.assertIsNone(g["ao"])
        np.testing.assert_array_equal(g["sum"], aa + ao)
        datum["graphs"][0]["ao"] = ao.tobytes()
        with self.assertRaises(wire.WireError):
            wire.decode_scored(wire.codec("Scored").encode(datum))


def _trajectory(k):
    return {"trajectory_id": "t", "prompt_id": "p", "group_size": 1, "sample_index": 0, "policy_version": 0,
            "created_at_ms": 0, "prompt": [1, 2],
            "turns": [{"kind": "tool", "action": [3], "observation": [4]} for _ in range(k - 1)]
            + [{"kind": "answer", "action": [5], "observation": []}], "reward": 1.0}


def _plain(t):
    """A decoded trajectory as the encoder takes it (numpy views back to bytes)."""
    out = dict(t)
    for f in ("prompt", "gold_target", "rollout_logprobs"):
        if isinstance(out.get(f), np.ndarray):
            out[f] = out[f].tobytes()
    out["turns"] = [{"kind": tu["kind"], "action": tu["action"].tobytes(), "observation": tu["observation"].tobytes()
                     if isinstance(tu["observation"], np.ndarray) else (tu["observation"] or b"")} for tu in t["turns"]]
    return out


class FastDecoder(unittest.TestCase):
    """The straight-line decoder returns what the checking decoder returns, or leaves the
    bytes to it (never a different value, never a value where it raises)."""

    @staticmethod
    def plain(v):
        if isinstance(v, memoryview):
            return bytes(v)
        if isinstance(v, np.ndarray):  # a packed field (decode(packed=True)): its bytes
            return v.tobytes()
        if isinstance(v, dict):
            return {k: FastDecoder.plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [FastDecoder.plain(x) for x in v]
        return v

    def check(self, schema, body, pos=10):
        from creditflow._avro import DecodeError
        from creditflow._avro_fast import FALLBACK
        mv = memoryview(body)
        try:
            slow = schema._dec(body, mv, pos)
        except DecodeError:
            slow = None
        kinds = []
        for fn in (schema._fast, schema._fast_packed, schema.fast_whole):
            if fn is None:
                continue
            try:
                fast = fn(body, mv, pos)
            except FALLBACK:
                kinds.append("fallback")
                continue
            self.assertIsNotNone(slow, "the fast decoder accepted bytes the checking one refuses")
            self.assertEqual(self.plain(fast[0]), self.plain(slow[0]))
            self.assertEqual(fast[1], slow[1])
            if fn is schema.fast_whole:  # the whole input, and packed arrays of one count
                self.assertEqual(fast[1], len(body))
                counts = {v.size for v in fast[0].values() if isinstance(v, np.ndarray)}
                self.assertLessEqual(len(counts), 1)
            kinds.append("fast")
        # the packed and whole decoders may leave more to the checking one (a misaligned packed
        # field, trailing bytes, arrays of different counts), never less
        self.assertFalse(kinds[0] == "fallback" and "fast" in kinds[1:], "a packed decoder read what the plain one refused")
        return kinds

    def test_agrees_with_the_checking_decoder(self):
        import random
        rng = random.Random(7)
        values = []
        for n in (0, 1, 8, 300, 3000):  # packed lengths in one-, two- and three-byte varints
            for ppo in (False, True):
                for current in (True, False):
                    values.append(("Sample", wire.codec("Sample").encode(sample_datum(n, seed=n, ppo=ppo, current=current),
                                                                         None if current else wire.LEGACY)))
        values += [("Scored", bytes.fromhex(l)) for l in _golden_scored()[:3]]
        kinds = {"fast": 0, "fallback": 0}
        for name, v in values:
            c = wire.codec(name)
            schema = c.readers[v[2:10]]
            self.assertEqual(set(self.check(schema, v)), {"fast"})  # every fast decoder reads it
            for _ in range(300):  # mutations: flipped bytes, cuts
                b = bytearray(v)
                for _ in range(rng.randint(1, 3)):
                    i = rng.randrange(10, len(b))
                    b[i] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
                if rng.random() < 0.3:
                    b = b[:rng.randrange(10, len(b))]
                kinds[self.check(schema, bytes(b))[0]] += 1
        self.assertGreater(kinds["fallback"], 0)
        self.assertGreater(kinds["fast"], 0)


def _golden_scored():
    import os
    p = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "testdata", "v2", "scored_attnsr_groups.hex")
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return f.read().split()
