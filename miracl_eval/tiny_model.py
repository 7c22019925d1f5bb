"""A tiny, random, offline checkpoint in BGE-M3's layout, for tests and for runs without the hub.

The directory holds what ``BAAI/bge-m3`` holds, at toy size: an XLM-RoBERTa encoder
(``config.json`` + ``model.safetensors``), a fast tokenizer (``tokenizer.json`` +
``tokenizer_config.json``) and the two BGE-M3 heads, ``sparse_linear.pt`` (``Linear(hidden, 1)``)
and ``colbert_linear.pt`` (``Linear(hidden, hidden)``). Both :mod:`miracl_eval.encoding` and
FlagEmbedding's ``BGEM3FlagModel`` load it.

The tokenizer is a byte-level BPE trained on the given texts (BPE training is deterministic; the
Unigram trainer is not), so it copes with every script and never yields ``<unk>``. Special tokens
have XLM-R's ids: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 (and ``<mask>`` 4). The weights
are random (``initializer_range`` 0.5, so that dense vectors spread instead of all scores tying);
the sparse head's bias is set so that about ``positive_share`` of the token weights over the
training texts are positive. Two builds from the same inputs are byte-identical.

CLI: ``python -m miracl_eval.tiny_model OUT_DIR --corpus FILE [FILE ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch

from .atomic import atomic_output
from .errors import MiraclEvalError
from .loading import iter_corpus
from .preprocess import join_title

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # ids 0..4, XLM-R's first four ids


def texts_from_corpora(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """Yield ``"{title} {text}"`` (just the text when there is no title) of every passage of MIRACL corpora."""
    for path in paths:
        for _, passage in iter_corpus(path):
            yield join_title(passage.title, passage.text, "{title} {text}")


def _train_tokenizer(texts: Sequence[str], vocab_size: int, model_max_length: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    if [ids[t] for t in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):  # pragma: no cover - trainer contract
        raise RuntimeError(f"unexpected special token ids {ids}")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=model_max_length,
        model_input_names=["input_ids", "attention_mask"],
        padding_side="right",
    )


@torch.inference_mode()
def _sparse_bias(
    model, tokenizer, weight: torch.Tensor, texts: Sequence[str], positive_share: float, sample_size: int
) -> float:
    """The bias giving about ``positive_share`` positive raw token scores over the first ``sample_size`` texts."""
    sample = list(texts[: max(sample_size, 1)])
    enc = tokenizer(sample, truncation=True, max_length=128, padding=True, return_tensors="pt")
    hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    raw = hidden @ weight[0]
    special = torch.isin(enc["input_ids"], torch.tensor([0, 1, 2, 3]))
    values = raw[enc["attention_mask"].bool() & ~special].double()
    # Rounded, so that float noise (thread counts, BLAS) cannot change the bytes written.
    return round(-float(torch.quantile(values, 1.0 - positive_share)), 3)


def build_tiny_checkpoint(
    out_dir: str | os.PathLike[str],
    texts: Iterable[str],
    seed: int = 0,
    vocab_size: int = 2000,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int = 64,
    max_position: int = 520,
    *,
    initializer_range: float = 0.5,
    positive_share: float = 0.4,
    bias_sample: int = 256,
) -> Path:
    """Build a random BGE-M3-layout checkpoint in ``out_dir`` (atomically) and return its path.

    ``vocab_size`` is both the tokenizer's maximum vocabulary (BPE stops earlier on small
    training texts) and the embedding matrix's row count. ``max_position`` counts XLM-R's two
    reserved positions, so inputs may have up to ``max_position - 2`` tokens. The sparse bias is
    fitted on the first ``bias_sample`` texts (truncated to 128 tokens).
    """
    from transformers import XLMRobertaConfig, XLMRobertaModel

    texts = [t for t in texts if t.strip()]
    if not texts:
        raise MiraclEvalError("build_tiny_checkpoint: no training texts")
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (byte alphabet + specials)")
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    if not 0.0 < positive_share < 1.0:
        raise ValueError("positive_share must lie strictly between 0 and 1")

    tokenizer = _train_tokenizer(texts, vocab_size, model_max_length=max_position - 2)
    config = XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_position,
        type_vocab_size=1,
        initializer_range=initializer_range,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    config.architectures = ["XLMRobertaModel"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = XLMRobertaModel(config).eval()
        colbert = torch.nn.Linear(hidden, hidden)
        sparse = torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        sparse.bias.fill_(_sparse_bias(model, tokenizer, sparse.weight, texts, positive_share, bias_sample))
    # Calling the tokenizer with truncation/padding sets them on its backend: do not save them.
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()

    with atomic_output(out_dir, directory=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        # The archive name inside a torch.save zip is the file's stem: save under the final names.
        for name, head in (("sparse_linear.pt", sparse), ("colbert_linear.pt", colbert)):
            torch.save({k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}, tmp / name)
    return Path(out_dir)


def _portable_tokenizer_config(path: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast``: transformers 5 names it ``TokenizersBackend``,
    which transformers 4 cannot load; both versions load ``PreTrainedTokenizerFast`` from tokenizer.json."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miracl_eval.tiny_model",
        description="Build a tiny random BGE-M3-layout checkpoint (offline) with a tokenizer trained on corpora.",
    )
    parser.add_argument("out_dir", help="directory to create (replaced if it exists)")
    parser.add_argument("--corpus", nargs="+", required=True, help="MIRACL corpus files (JSONL, .gz or Parquet)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=64)
    parser.add_argument("--max-position", type=int, default=520)
    args = parser.parse_args(argv)
    try:
        out = build_tiny_checkpoint(
            args.out_dir,
            texts_from_corpora(args.corpus),
            seed=args.seed,
            vocab_size=args.vocab_size,
            hidden=args.hidden,
            layers=args.layers,
            heads=args.heads,
            intermediate=args.intermediate,
            max_position=args.max_position,
        )
    except MiraclEvalError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
