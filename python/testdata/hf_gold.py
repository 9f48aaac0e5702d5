"""Gold targets from Hugging Face tokenizers: for each tokenizer.json given (NAME=PATH), a
transformers PreTrainedTokenizerFast wraps it and creditflow.build_trajectory(tokenize=...)
fills the LAPO gold target of trajectories with several gold answers (ASCII, accented, CJK,
emoji, surrounding spaces, a blank one); the built-in byte tokenizer too (NAME "bytes").
Writes JSON: per tokenizer, per gold answer, the template text, the gold target and span, the
ids the tokenizers library itself gives for the text, and the encoded trajectory (hex).

    python hf_gold.py OUT.json NAME=PATH ...
"""

import json
import sys

import creditflow
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

GOLDS = ["Grace Hopper", "Zürich", "東京", "👍🏽 ok", "  spaced  ", "a", "42", "Ωmega façade", "", " \t"]


def hf_tokenize(tok):
    def tokenize(text):  # docs/python.md
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], enc["offset_mapping"]
    return tokenize


def main():
    out = {}
    for arg in ["bytes=-"] + sys.argv[2:]:
        name, path = arg.split("=", 1)
        if name == "bytes":
            tokenize, raw = creditflow.byte_tokenizer, (lambda s: list(s.encode()))
        else:
            tokenize = hf_tokenize(PreTrainedTokenizerFast(tokenizer_file=path))
            lib = Tokenizer.from_file(path)
            raw = (lambda lib: lambda s: lib.encode(s, add_special_tokens=False).ids)(lib)
        cases = []
        for i, gold in enumerate(GOLDS):
            t = creditflow.build_trajectory(
                trajectory_id="%s-%d" % (name, i), prompt_id="p", group_size=2, sample_index=0,
                prompt_ids=[5, 6, 7], turns=[("search", [8, 9], [10, 11, 12]), ("search", [13], [14, 15]), ("answer", [16])],
                policy_version=1, pred_answer=gold, gold_answers=[gold, "other"], tokenize=tokenize,
                temperature=0.7, created_at_ms=1)
            text = creditflow.DEFAULT_TEMPLATE.replace("{gold}", gold)
            cases.append({"gold": gold, "text": text, "target": [int(x) for x in t["gold_target"]],
                          "span": list(t["gold_span"]), "library_ids": raw(text),
                          "avro": creditflow.encode_trajectory(t).hex()})
        out[name] = cases
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
