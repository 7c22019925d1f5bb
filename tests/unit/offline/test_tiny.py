"""The tiny offline checkpoints (BGE-M3 layout, encoders, decoder, masked LM): deterministic, loadable,
tokenizers round-trip."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from miracl_eval.offline.tiny import KINDS, _train_tokenizer, build_tiny_checkpoint, main, texts_from_corpora
from tests.helpers import CORPORA

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BASE_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
FILES = BASE_FILES | {"sparse_linear.pt", "colbert_linear.pt"}
PROBES = [
    "แม่น้ำเจ้าพระยายาวกี่กิโลเมตร",
    "利根川の長さは何キロメートルですか？",
    "长江是中国最长的河流",
    "ما هو أطول نهر في العالم؟",
    "ＡＢＣ ﬁne café  — x²",  # NFKC-sensitive: the normalizer must survive a reload
    "Der Rhein fließt durch Köln. ¿Dónde está Ñandú?",
    "",
    "🙂 emoji and \t tabs\nnewlines",
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(texts_from_corpora(CORPORA))


@pytest.fixture(scope="module")
def builds(tmp_path_factory, texts, tiny_checkpoint) -> tuple[Path, Path]:
    """The session's checkpoint (built from the text list) and one built here from an iterator."""
    return tiny_checkpoint, build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "b", iter(texts))


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_texts_from_corpora(texts):
    assert len(texts) == sum(1 for p in CORPORA for line in p.read_text(encoding="utf-8").splitlines() if line.strip())
    first = json.loads(CORPORA[0].read_text(encoding="utf-8").splitlines()[0])
    assert texts[0] == f"{first['title']} {first['text']}"


def test_two_builds_are_byte_identical(builds):
    a, b = builds
    assert {p.name for p in a.iterdir()} == FILES
    assert _digests(a) == _digests(b)
    assert not [p for p in a.parent.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_a_different_seed_changes_the_weights(builds, texts, tmp_path):
    other = build_tiny_checkpoint(tmp_path / "c", texts, seed=1)
    da, dc = _digests(builds[0]), _digests(other)
    assert da["tokenizer.json"] == dc["tokenizer.json"]
    assert da["model.safetensors"] != dc["model.safetensors"]
    assert da["sparse_linear.pt"] != dc["sparse_linear.pt"]


def test_tokenizer_round_trip(builds, texts):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    folder = builds[0]
    reloaded = AutoTokenizer.from_pretrained(folder)
    fresh = _train_tokenizer(texts, 2000, model_max_length=518)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["truncation"] is None and saved["padding"] is None
    assert saved["normalizer"]["type"] == "NFKC" and saved["model"]["type"] == "BPE"
    probes = PROBES + texts[::7]
    for text in probes:
        ids = reloaded(text)["input_ids"]
        assert ids == fresh(text)["input_ids"] == raw.encode(text).ids, text
        assert ids[0] == 0 and ids[-1] == 2
        assert 3 not in ids  # byte-level: nothing is unknown
    assert reloaded("ＡＢＣ")["input_ids"] == reloaded("ABC")["input_ids"]  # NFKC kept
    assert (reloaded.cls_token_id, reloaded.pad_token_id, reloaded.eos_token_id, reloaded.unk_token_id) == (0, 1, 2, 3)
    assert reloaded.model_input_names == ["input_ids", "attention_mask"]
    batch = reloaded(probes[:3], padding=True)
    assert all(row[-1] in (1, 2) for row in batch["input_ids"])  # right padding with <pad>
    long = reloaded(" ".join(texts[:20]), truncation=True, max_length=16)["input_ids"]
    assert len(long) == 16 and long[0] == 0 and long[-1] == 2


def test_checkpoint_loads_and_heads_behave(builds, texts):
    from transformers import AutoModel, AutoTokenizer

    folder = builds[0]
    model = AutoModel.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    cfg = model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == ("xlm-roberta", 32, 2, 2000)
    assert len(tok) <= cfg.vocab_size
    sparse = torch.load(folder / "sparse_linear.pt", weights_only=True)
    colbert = torch.load(folder / "colbert_linear.pt", weights_only=True)
    assert sparse["weight"].shape == (1, 32) and sparse["bias"].shape == (1,)
    assert colbert["weight"].shape == (32, 32) and colbert["bias"].shape == (32,)

    sample = texts[:: max(1, len(texts) // 150)]  # about 150 texts, 11k pairs
    enc = tok(sample, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    raw = hidden @ sparse["weight"][0] + sparse["bias"][0]
    real = enc["attention_mask"].bool() & (enc["input_ids"] > 3)
    share = float((raw[real] > 0).float().mean())
    assert 0.25 < share < 0.6, share
    dense = torch.nn.functional.normalize(hidden[:, 0], dim=-1)
    cos = (dense @ dense.T)[~torch.eye(len(sample), dtype=torch.bool)]
    assert float(cos.std()) > 0.05 and float(cos.min()) < 0.9  # vectors spread: scores do not tie
    upper = (dense @ dense.T)[torch.triu(torch.ones(len(sample), len(sample), dtype=torch.bool), diagonal=1)]
    assert len(np.unique(upper.numpy())) > 0.99 * len(upper)


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main([str(out), "--corpus", str(CORPORA[0]), str(CORPORA[1]), "--hidden", "16", "--heads", "2"]) == 0
    assert {p.name for p in out.iterdir()} == FILES
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 16
    assert main([str(tmp_path / "dec"), "--corpus", str(CORPORA[0]), "--kind", "decoder"]) == 0
    assert {p.name for p in (tmp_path / "dec").iterdir()} == BASE_FILES
    assert json.loads((tmp_path / "dec" / "config.json").read_text())["architectures"] == ["MistralModel"]
    assert main([str(tmp_path / "bad"), "--corpus", str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


#: kind -> (architecture, special token ids (cls/bos, sep/eos, pad, unk, mask), the ids of "a" around the text)
LAYOUTS = {
    "xlm-r": ("XLMRobertaModel", (0, 2, 1, 3, 4), (0, 2)),
    "bert": ("BertModel", (2, 3, 0, 1, 4), (2, 3)),
    "decoder": ("MistralModel", (1, 2, 0, 0, None), (1, None)),
    "mlm": ("BertForMaskedLM", (2, 3, 0, 1, 4), (2, 3)),
}


@pytest.mark.parametrize("kind", list(LAYOUTS))
def test_other_kinds_are_deterministic_and_load(tiny_checkpoints, texts, tmp_path, kind):
    import transformers

    folder = tiny_checkpoints(kind)
    again = build_tiny_checkpoint(tmp_path / kind, iter(texts), kind=kind)
    assert {p.name for p in folder.iterdir()} == BASE_FILES
    assert _digests(folder) == _digests(again)
    architecture, specials, around = LAYOUTS[kind]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == [architecture] and config["hidden_size"] == 32 and config["vocab_size"] == 2000
    model = getattr(transformers, architecture).from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    first, last, pad, unk, mask = specials
    assert (tok.bos_token_id if kind == "decoder" else tok.cls_token_id) == first
    assert (tok.eos_token_id if kind == "decoder" else tok.sep_token_id) == last
    assert (tok.pad_token_id, tok.unk_token_id, tok.mask_token_id) == (pad, unk, mask)
    for text in PROBES:
        ids = tok(text)["input_ids"]
        assert ids[0] == around[0] and (around[1] is None or ids[-1] == around[1]), (kind, text, ids)
        assert unk not in ids[1:]  # byte-level: nothing is unknown
        assert ids.count(last) == (0 if kind == "decoder" else 1)  # Mistral's tokenizer adds <s> only
    enc = tok(texts[:8], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc)
    if kind == "mlm":  # the output bias leaves about 5 % of the max-pooled vocabulary logits positive
        pooled = out.logits.masked_fill(~enc["attention_mask"].bool()[:, :, None], -torch.inf).amax(dim=1)
        assert 0.01 < float((pooled > 0).float().mean()) < 0.2
    else:
        hidden = out.last_hidden_state[:, 0] if kind != "decoder" else out.last_hidden_state[:, -1]
        cos = torch.nn.functional.cosine_similarity(hidden[:, None], hidden[None], dim=-1)
        assert float(cos[~torch.eye(8, dtype=torch.bool)].max()) < 0.99  # vectors spread: scores do not tie


@pytest.mark.parametrize("kind", ["cross-encoder", "llm"])
def test_reranker_kinds_are_deterministic_and_score_pairs_apart(tiny_checkpoints, texts, tmp_path, kind):
    import transformers

    folder = tiny_checkpoints(kind)
    assert _digests(folder) == _digests(build_tiny_checkpoint(tmp_path / kind, iter(texts), kind=kind))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    auto = (
        transformers.AutoModelForSequenceClassification
        if kind == "cross-encoder"
        else transformers.AutoModelForCausalLM
    )
    model = auto.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    if kind == "cross-encoder":
        assert config["architectures"] == ["XLMRobertaForSequenceClassification"] and len(config["id2label"]) == 1
        enc = tok(texts[:8], texts[8:16], padding=True, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            scores = model(**enc).logits[:, 0]
    else:
        assert config["architectures"] == ["MistralForCausalLM"]
        enc = tok(texts[:8], padding=True, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            scores = model(**enc).logits[:, -1, tok("Yes", add_special_tokens=False)["input_ids"][0]]
    assert len(set(scores.round(decimals=4).tolist())) == 8  # a reranker's scores do not tie


def test_unknown_kind(texts, tmp_path):
    assert set(KINDS) == {"bge-m3", "cross-encoder", "llm", "qwen3", *LAYOUTS}
    with pytest.raises(ValueError, match="unknown checkpoint kind 'gpt'"):
        build_tiny_checkpoint(tmp_path / "x", texts, kind="gpt")
    assert not (tmp_path / "x").exists()
