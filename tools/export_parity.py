"""Before/after of the hf export: how many texts give other ids than bpe_store through tokenizers, per
named pattern ("before" rebuilds the pre-tokenizer main wrote at 5148ddb). Run from the checkout:
`python tools/export_parity.py` (needs tokenizers and ../shared/corpora). Then, per pattern, how
many of 20,000 random texts (random code points among digits, spaces, line ends, contractions,
marks) Oniguruma splits unlike `regex` with the raw and the rewritten pattern, and of 3,000
tiktoken (fancy-regex)."""
import json
import random
import sys
import tempfile
from pathlib import Path

import regex
import tokenizers

from bpe_store.tokenizer.export import export_store
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

sys.path.insert(0, "tests")  # the texts of the tests: one list, not two
from conftest import EN, RU, ZH, fixture_text  # noqa: E402
from test_patterns import tiktoken_pieces  # noqa: E402
from test_portable_pattern import TARGETED, onig_pieces  # noqa: E402

from bpe_store.formats.portable_pattern import _ALL_CHARS, portable_pattern  # noqa: E402
from bpe_store.text.pretokenize import PATTERNS  # noqa: E402

EOT = "<|endoftext|>"
d = Path(tempfile.mkdtemp())
src = d / "t.txt"
src.write_text(EOT.join(fixture_text(c, 100_000) for c in (EN, RU, ZH)), encoding="utf-8")
docs = []
for name in ("enwiki-100M.txt", "zhwiki-20M.txt", "tinystories-ru-20M.txt"):
    with open(Path("..", "shared", "corpora", name), "rb") as f:
        data = f.read(20_000_000).decode("utf-8", "ignore")
    rng = random.Random(0)
    for _ in range(100):
        o = rng.randrange(len(data) - 2000)
        docs.append(data[o:o + 2000])
texts = TARGETED + docs
for pat in ("gpt2", "gpt4", "o200k"):
    db = d / f"{pat}.db"
    train([src], db, 2000, [EOT], workers=1, pattern=pat)
    ours = Tokenizer.from_store(db)
    export_store(db, "hf", d / pat)
    doc = json.loads((d / pat / "tokenizer.json").read_text())
    after = tokenizers.Tokenizer.from_file(str(d / pat / "tokenizer.json"))
    # before (main at 5148ddb): ByteLevel for gpt2, else Split(raw pattern, Isolated) + ByteLevel
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc["pre_tokenizer"] = bl if pat == "gpt2" else {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": ours.pattern}, "behavior": "Isolated", "invert": False},
        {**bl, "use_regex": False}]}
    before = tokenizers.Tokenizer.from_str(json.dumps(doc))
    nb = sum(before.encode(t).ids != ours.encode(t) for t in texts)
    na = sum(after.encode(t).ids != ours.encode(t) for t in texts)
    nbd = sum(before.encode(t).ids != ours.encode(t) for t in docs)
    print(f"{pat}: {len(texts)} texts ({len(TARGETED)} targeted + {len(docs)} 2000-char corpus slices): "
          f"differ before {nb} (slices {nbd}), after {na}", flush=True)


rng = random.Random(1)
pieces = list("0123456789١٢३\u0301\u200d 🙃'sSlLtTdDmMvVeErR\t\r\n\x0b\x0c\x85\xa0\u3000\u2028.,!ǅʰ中") + [
    " ", "\n", "\r\n", "  \n", "'S", "'ll", "1234", "\t", "\U000107bb", "\U00011de1", *TARGETED]
texts = ["".join(rng.choice(_ALL_CHARS) if rng.random() < 0.3 else rng.choice(pieces)
                 for _ in range(rng.randint(0, 30))) for _ in range(20_000)]
for pat in ("gpt2", "gpt4", "o200k"):
    raw, out = PATTERNS[pat], portable_pattern(PATTERNS[pat])
    want = [regex.findall(raw, t) for t in texts]
    counts = [sum(onig_pieces(t, p) != w for t, w in zip(texts, want)) for p in (raw, out)]
    counts += [sum(tiktoken_pieces(t, p) != [x.encode() for x in w] for t, w in zip(texts[:3000], want))
               for p in (raw, out)]
    print(f"{pat}: Oniguruma splits unlike regex {counts[0]}/20000 texts raw, {counts[1]} rewritten; "
          f"fancy-regex {counts[2]}/3000 raw, {counts[3]} rewritten", flush=True)
