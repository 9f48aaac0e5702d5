"""Trains a byte-level BPE and a Unigram tokenizer with the Hugging Face tokenizers library on a
small synthetic corpus (ASCII, accented Latin, CJK, emoji, special tokens), saves each as a
tokenizer.json (the Unigram one with several decoder chains: T5's Metaspace, Llama 2's
Replace/ByteFallback/Fuse/Strip, Gemma's without Strip, Metaspace with byte fallback and each
prepend scheme) and writes, for each file, id sequences with tokenizers' own decode of them
(skip_special_tokens=False): every id alone, encodings of corpus sentences and random cuts of
them (characters split across ids), random id sequences, and random runs of byte tokens.

    python hf_decode.py OUTDIR  ->  OUTDIR/<name>/tokenizer.json and OUTDIR/cases.json
"""

import json
import os
import random
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[DELETE]", "<|é▁|>"]


def corpus(r):
    words = ("the cat sat on a mat Paris Grace Hopper search answer café naïve Zürich façade "
             "jalapeño Ωmega ß ñ € 中文 日本語 東京 한국어 😀 🚀 👍🏽 ĀĂ ‰ \t tab").split(" ")
    out = []
    for _ in range(400):
        n = r.randrange(3, 14)
        s = " ".join(r.choice(words) for _ in range(n))
        if r.random() < 0.2:
            s = r.choice(SPECIALS[:3]) + s + r.choice(SPECIALS[:3])
        if r.random() < 0.1:
            s = "  " + s + "\n"
        out.append(s)
    return out


def byte_level_bpe(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    # Added tokens that are not special: one whose characters are all in the byte table
    # ("Ġhi" reads " hi"), one with a space (kept as it is).
    tok.add_tokens([AddedToken("Ġhi", special=False), AddedToken(" plain", special=False)])
    return tok


def unigram(texts):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.train_from_iterator(texts, trainers.UnigramTrainer(
        vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"] + SPECIALS, unk_token="<unk>"))
    # Byte fallback as SentencePiece has it: the 256 <0xHH> pieces, scored below every other.
    m = json.loads(tok.to_str())["model"]
    vocab = [tuple(v) for v in m["vocab"]]
    low = min(s for _, s in vocab) - 1.0
    have = {p for p, _ in vocab}
    vocab += [("<0x%02X>" % b, low) for b in range(256) if "<0x%02X>" % b not in have]
    tok.model = models.Unigram(vocab, unk_id=m["unk_id"], byte_fallback=True)
    return tok


UNIGRAM_DECODERS = {
    "unigram-t5": lambda: decoders.Metaspace(replacement="▁", prepend_scheme="always"),
    "unigram-llama2": lambda: decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                                 decoders.Fuse(), decoders.Strip(" ", 1, 0)]),
    "unigram-gemma": lambda: decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
    "unigram-metaspace-first": lambda: decoders.Sequence([decoders.ByteFallback(),
                                                          decoders.Metaspace(prepend_scheme="first")]),
    "unigram-metaspace-never": lambda: decoders.Sequence([decoders.ByteFallback(),
                                                          decoders.Metaspace(prepend_scheme="never")]),
    "unigram-none": lambda: None,
}


def cases(r, tok, texts):
    n = tok.get_vocab_size(with_added_tokens=True)
    seqs = [[i] for i in range(n)]
    byte_ids = [i for i in range(n) if (tok.id_to_token(i) or "").startswith("<0x")]
    for s in texts[:120]:
        ids = tok.encode(s).ids
        seqs.append(ids)
        for _ in range(3):  # cuts: a character's bytes split across the cut
            a = r.randrange(len(ids) + 1)
            b = r.randrange(len(ids) + 1)
            seqs.append(ids[min(a, b):max(a, b)])
    for _ in range(400):
        seqs.append([r.randrange(n) for _ in range(r.randrange(1, 24))])
    if byte_ids:
        for _ in range(200):  # runs of byte-fallback tokens: valid characters, cut ones and stray bytes
            seq = []
            for _ in range(r.randrange(1, 6)):
                if r.random() < 0.5:
                    ch = r.choice("é€😀中ñß")
                    bs = list(ch.encode())
                    if r.random() < 0.4:
                        bs = bs[:r.randrange(1, len(bs) + 1)]
                    seq += [tok.token_to_id("<0x%02X>" % b) for b in bs]
                elif r.random() < 0.5:
                    seq.append(r.choice(byte_ids))
                else:
                    seq.append(r.randrange(n))
            seqs.append(seq)
    return [{"ids": s, "text": tok.decode(s, skip_special_tokens=False)} for s in seqs]


def main():
    out = sys.argv[1]
    r = random.Random(38)
    texts = corpus(r)
    toks = {"bpe-byte-level": byte_level_bpe(texts)}
    base = unigram(texts)
    for name, dec in UNIGRAM_DECODERS.items():
        t = Tokenizer.from_str(base.to_str())
        t.decoder = dec()
        toks[name] = t
    result = {}
    for name, tok in toks.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        path = os.path.join(out, name, "tokenizer.json")
        tok.save(path)
        result[name] = {"path": path, "cases": cases(r, tok, texts)}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
