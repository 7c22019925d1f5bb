"""Tiny, random, offline checkpoints of every model family, for tests and for runs without the hub.

One entry point, :func:`build_tiny_checkpoint`, and one ``kind`` per checkpoint layout:

* ``bge-m3``: what ``BAAI/bge-m3`` holds, at toy size: an XLM-RoBERTa encoder, a fast tokenizer
  and the two BGE-M3 heads, ``sparse_linear.pt`` (``Linear(hidden, 1)``) and
  ``colbert_linear.pt`` (``Linear(hidden, hidden)``). :mod:`miracl_eval.encoders.bge_m3` and
  FlagEmbedding's ``BGEM3FlagModel`` both load it;
* ``xlm-r`` and ``bert``: an XLM-RoBERTa or a BERT encoder (CLS or mean pooling: E5, mDPR, ...);
* ``decoder``: a Mistral decoder whose tokenizer adds ``<s>`` only, as Mistral's (last-token
  pooling appends ``</s>``);
* ``mlm``: a BERT masked language model (``BertForMaskedLM``, for SPLADE);
* ``cross-encoder``: an XLM-RoBERTa sequence classifier with one label (a cross-encoder reranker);
* ``llm``: a Mistral causal language model with its head (an LLM reranker).

Every folder holds ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
``tokenizer_config.json``. The tokenizer is a byte-level BPE trained on the given texts (BPE
training is deterministic; the Unigram trainer is not), so it copes with every script and never
yields an unknown token; its special tokens have the ids of the layout's family (XLM-R: ``<s>``
0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, ``<mask>`` 4; BERT: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]``
2, ``[SEP]`` 3, ``[MASK]`` 4; Mistral: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, padding with
``<unk>``). The weights are random (``initializer_range`` 0.5, so that vectors spread instead of
all scores tying); the bias of the BGE-M3 sparse head (or of the masked LM's output layer) is
set so that about ``positive_share`` of the token weights (or of the max-pooled vocabulary
logits) over the training texts are positive. Two builds from the same inputs are
byte-identical.

:func:`add_sentence_transformers_files` gives a built checkpoint the files with which
sentence-transformers runs it (``modules.json`` and each module's folder, written here as its earlier
releases and many hub checkpoints have them, e.g. LaBSE's: a Pooling mode, Dense projection heads with
random weights, a Normalize, ``sentence_bert_config.json``'s ``max_seq_length`` and ``do_lower_case``, and
the prompts), for tests that compare a module chain with ``SentenceTransformer(folder)``.

CLI: ``python -m miracl_eval.offline.tiny OUT_DIR --corpus FILE [FILE ...] [--kind KIND]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from miracl_eval.atomic import atomic_output
from miracl_eval.errors import MiraclEvalError
from miracl_eval.inputs.loading import iter_corpus
from miracl_eval.inputs.preprocess import join_title


@dataclass(frozen=True)
class TokenizerStyle:
    """The special tokens (ids 0, 1, ... in this order) and the template of a family's tokenizer."""

    specials: tuple[str, ...]
    single: str  # the post-processor's template for one text
    pair: str  # ... and for a pair of texts
    roles: Mapping[str, str]  # transformers' special-token arguments (bos_token, ...)
    position_offset: int = 0  # positions the model reserves (XLM-R: 2)


XLMR = TokenizerStyle(
    ("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
    "<s> $A </s>",
    "<s> $A </s> </s> $B </s>",
    {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "cls_token": "<s>",
        "sep_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
    },
    position_offset=2,
)
BERT = TokenizerStyle(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "[CLS] $A [SEP]",
    "[CLS] $A [SEP] $B:1 [SEP]:1",
    {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"},
)
MISTRAL = TokenizerStyle(
    ("<unk>", "<s>", "</s>"),
    "<s> $A",
    "<s> $A <s> $B",
    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>"},
)
QWEN3 = TokenizerStyle(
    ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    "$A <|endoftext|>",  # Qwen3-Embedding's tokenizer ends every text with <|endoftext|>, its pad token too
    "$A <|endoftext|> $B <|endoftext|>",
    {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
)
#: kind -> tokenizer style
KINDS: Mapping[str, TokenizerStyle] = {
    "bge-m3": XLMR,
    "xlm-r": XLMR,
    "bert": BERT,
    "decoder": MISTRAL,
    "mlm": BERT,
    "cross-encoder": XLMR,  # an XLM-R sequence classifier with one label (a reranker's head)
    "llm": MISTRAL,  # a decoder with its language-model head (an LLM reranker's)
    "qwen3": QWEN3,  # a Qwen3 decoder as Qwen3-Embedding's (last-token pooling)
}
#: the share of positive sparse weights the bias is fitted to, by kind
POSITIVE_SHARE = {"bge-m3": 0.4, "mlm": 0.05}


def texts_from_corpora(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """Yield ``"{title} {text}"`` (just the text when there is no title) of every passage of MIRACL corpora."""
    for path in paths:
        for _, passage in iter_corpus(path):
            yield join_title(passage.title, passage.text, "{title} {text}")


def _train_tokenizer(texts: Sequence[str], vocab_size: int, model_max_length: int, style: TokenizerStyle = XLMR):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(style.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    ids = {t: tok.token_to_id(t) for t in style.specials}
    if [ids[t] for t in style.specials] != list(range(len(style.specials))):  # pragma: no cover - trainer contract
        raise RuntimeError(f"unexpected special token ids {ids}")
    used = {part.split(":")[0] for part in f"{style.single} {style.pair}".split()} & set(style.specials)
    tok.post_processor = processors.TemplateProcessing(
        single=style.single, pair=style.pair, special_tokens=[(t, ids[t]) for t in style.specials if t in used]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **style.roles,
        model_max_length=model_max_length,
        model_input_names=["input_ids", "attention_mask"],
        padding_side="right",
    )


def _model(
    kind: str,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    intermediate: int,
    max_position: int,
    initializer_range: float,
) -> torch.nn.Module:
    """The random transformers model of ``kind`` (built under the caller's seed)."""
    import transformers

    sizes: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_position,
        initializer_range=initializer_range,
    )
    config: transformers.PretrainedConfig
    if kind in ("decoder", "llm"):
        config = transformers.MistralConfig(
            **sizes,
            num_key_value_heads=max(1, heads // 2),
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            sliding_window=None,
            tie_word_embeddings=False,
        )
        name = "MistralForCausalLM" if kind == "llm" else "MistralModel"
    elif kind == "qwen3":
        config = transformers.Qwen3Config(
            **sizes,
            num_key_value_heads=max(1, heads // 2),
            head_dim=hidden // heads,
            eos_token_id=0,
            pad_token_id=0,
            bos_token_id=None,
            tie_word_embeddings=True,
        )
        name = "Qwen3Model"
    elif kind in ("bert", "mlm"):
        config = transformers.BertConfig(**sizes, type_vocab_size=2, pad_token_id=0)
        name = "BertForMaskedLM" if kind == "mlm" else "BertModel"
    else:
        config = transformers.XLMRobertaConfig(
            **sizes,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
        )
        if kind == "cross-encoder":
            config.num_labels = 1
        name = "XLMRobertaForSequenceClassification" if kind == "cross-encoder" else "XLMRobertaModel"
    config.architectures = [name]
    return getattr(transformers, name)(config).eval()


def _positive_bias(values: torch.Tensor, positive_share: float) -> float:
    """The bias that makes about ``positive_share`` of ``values`` positive."""
    # Rounded, so that float noise (thread counts, BLAS) cannot change the bytes written.
    return round(-float(torch.quantile(values.double().flatten(), 1.0 - positive_share)), 3)


@torch.inference_mode()
def _fitted_bias(
    kind: str,
    model: Any,
    tokenizer: Any,
    weight: torch.Tensor | None,
    texts: Sequence[str],
    positive_share: float,
    sample_size: int,
) -> float:
    """The bias of the BGE-M3 sparse head (``weight``) or of the masked LM's output, over the first texts."""
    sample = list(texts[: max(sample_size, 1)])
    enc = tokenizer(sample, truncation=True, max_length=128, padding=True, return_tensors="pt")
    mask = enc["attention_mask"].bool()
    out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    if kind == "mlm":  # the max over each text's tokens of the logits without the output bias
        logits = out.logits - model.cls.predictions.bias
        return _positive_bias(logits.masked_fill(~mask[:, :, None], -torch.inf).amax(dim=1), positive_share)
    assert weight is not None
    raw = out.last_hidden_state @ weight[0]
    special = torch.isin(enc["input_ids"], torch.tensor([0, 1, 2, 3]))
    return _positive_bias(raw[mask & ~special], positive_share)


def build_tiny_checkpoint(
    out_dir: str | os.PathLike[str],
    texts: Iterable[str],
    kind: str = "bge-m3",
    seed: int = 0,
    vocab_size: int = 2000,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int = 64,
    max_position: int = 520,
    *,
    initializer_range: float = 0.5,
    positive_share: float | None = None,
    bias_sample: int = 256,
    tokenizer_from: str | os.PathLike[str] | None = None,
) -> Path:
    """Build a random checkpoint of ``kind`` (see the module) in ``out_dir`` (atomically) and return its path.

    ``vocab_size`` is both the tokenizer's maximum vocabulary (BPE stops earlier on small
    training texts) and the embedding matrix's row count. ``max_position`` counts XLM-R's two
    reserved positions, so XLM-R inputs may have up to ``max_position - 2`` tokens. The bias of
    ``bge-m3``'s sparse head and of ``mlm``'s output is fitted on the first ``bias_sample``
    texts (truncated to 128 tokens) to ``positive_share`` (default 0.4 and 0.05).
    ``tokenizer_from``: a folder whose tokenizer the checkpoint gets instead of one trained on
    ``texts`` (e.g. XLM-R's, from me5-small); the vocabulary size is then that tokenizer's.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown checkpoint kind {kind!r}; valid: {', '.join(KINDS)}")
    style = KINDS[kind]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise MiraclEvalError("build_tiny_checkpoint: no training texts")
    if vocab_size < 256 + len(style.specials):
        raise ValueError(f"vocab_size must be at least {256 + len(style.specials)} (byte alphabet + specials)")
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    share = POSITIVE_SHARE.get(kind, 0.5) if positive_share is None else positive_share
    if not 0.0 < share < 1.0:
        raise ValueError("positive_share must lie strictly between 0 and 1")

    if tokenizer_from is None:
        tokenizer = _train_tokenizer(texts, vocab_size, max_position - style.position_offset, style)
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
        vocab_size = len(tokenizer)
    sizes = (vocab_size, hidden, layers, heads, intermediate, max_position, initializer_range)
    heads_out: dict[str, torch.nn.Linear] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: Any = _model(kind, *sizes)
        if kind == "bge-m3":
            heads_out = {
                "colbert_linear.pt": torch.nn.Linear(hidden, hidden),
                "sparse_linear.pt": torch.nn.Linear(hidden, 1),
            }
    with torch.no_grad():
        if kind == "bge-m3":
            sparse = heads_out["sparse_linear.pt"]
            sparse.bias.fill_(_fitted_bias(kind, model, tokenizer, sparse.weight, texts, share, bias_sample))
        elif kind == "mlm":
            model.cls.predictions.bias.fill_(_fitted_bias(kind, model, tokenizer, None, texts, share, bias_sample))
    # Calling the tokenizer with truncation/padding sets them on its backend: do not save them.
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()

    with atomic_output(out_dir, directory=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        # The archive name inside a torch.save zip is the file's stem: save under the final names.
        for name, head in heads_out.items():
            torch.save({k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}, tmp / name)
    return Path(out_dir)


@dataclass(frozen=True)
class DenseHeadSpec:
    """A Dense module to add: ``out_features`` wide, its ``activation`` a dotted torch class (as
    sentence-transformers saves it), a bias or not, its weights as ``model.safetensors`` or
    ``pytorch_model.bin``."""

    out_features: int
    activation: str = "torch.nn.modules.activation.Tanh"
    bias: bool = True
    weights_file: str = "model.safetensors"


#: the ``pooling_mode_*`` flag of each pooling mode (sentence-transformers' earlier file format)
_POOLING_FLAGS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def add_sentence_transformers_files(
    folder: str | os.PathLike[str],
    pooling: str = "mean",
    dense: Sequence[DenseHeadSpec] = (),
    normalize: bool = False,
    max_seq_length: int | None = None,
    do_lower_case: bool = False,
    prompts: Mapping[str, str] | None = None,
    seed: int = 0,
    legacy_pooling: bool = True,
) -> Path:
    """Write into checkpoint ``folder`` the sentence-transformers files of the chain Transformer, Pooling
    (``pooling``: one of sentence-transformers' modes; ``legacy_pooling``: as ``pooling_mode_*`` flags, else
    as ``pooling_mode``), the ``dense`` heads (``{i}_Dense``, random weights from ``seed``) and a Normalize,
    in that order; ``sentence_bert_config.json`` with ``max_seq_length`` (when given) and ``do_lower_case``;
    ``config_sentence_transformers.json`` with ``prompts``. Returns the folder."""
    root = Path(folder)
    hidden = int(json.loads((root / "config.json").read_text(encoding="utf-8"))["hidden_size"])

    def dump(path: Path, data: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    pooling_config: dict[str, Any] = {"word_embedding_dimension": hidden}
    if legacy_pooling:
        pooling_config.update({flag: mode == pooling for mode, flag in _POOLING_FLAGS.items()})
    else:
        pooling_config.update(pooling_mode=pooling, include_prompt=True)
    dump(root / "1_Pooling" / "config.json", pooling_config)
    width = hidden
    generator = torch.Generator().manual_seed(seed)
    for head in dense:
        name = f"{len(modules)}_Dense"
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": name,
                        "type": "sentence_transformers.models.Dense"})  # fmt: skip
        dump(root / name / "config.json", {"in_features": width, "out_features": head.out_features,
                                           "bias": head.bias, "activation_function": head.activation})  # fmt: skip
        state = {"linear.weight": torch.randn(head.out_features, width, generator=generator) / width**0.5}
        if head.bias:
            state["linear.bias"] = torch.randn(head.out_features, generator=generator) * 0.1
        if head.weights_file == "model.safetensors":
            from safetensors.torch import save_file

            save_file(state, str(root / name / head.weights_file))
        else:
            torch.save(state, root / name / head.weights_file)
        width = head.out_features
    if normalize:
        name = f"{len(modules)}_Normalize"
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": name,
                        "type": "sentence_transformers.models.Normalize"})  # fmt: skip
        (root / name).mkdir(exist_ok=True)  # an empty folder, as sentence-transformers 2 saves it
    dump(root / "modules.json", modules)
    transformer: dict[str, Any] = {"do_lower_case": do_lower_case}
    if max_seq_length is not None:
        transformer["max_seq_length"] = max_seq_length
    dump(root / "sentence_bert_config.json", transformer)
    dump(root / "config_sentence_transformers.json", {"prompts": dict(prompts or {}), "default_prompt_name": None})
    return root


def _portable_tokenizer_config(path: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast``: transformers 5 names it ``TokenizersBackend``,
    which transformers 4 cannot load; both versions load ``PreTrainedTokenizerFast`` from tokenizer.json."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miracl_eval.offline.tiny",
        description="Build a tiny random checkpoint (offline) with a tokenizer trained on corpora.",
    )
    parser.add_argument("out_dir", help="directory to create (replaced if it exists)")
    parser.add_argument("--corpus", nargs="+", required=True, help="MIRACL corpus files (JSONL, .gz or Parquet)")
    parser.add_argument("--kind", choices=list(KINDS), default="bge-m3", help="checkpoint layout (default bge-m3)")
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
            kind=args.kind,
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
