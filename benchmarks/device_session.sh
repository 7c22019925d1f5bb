#!/usr/bin/env bash
# One GPU machine, one command (docs/development/gpu-checks.md), within 9 min 40 s by its timeouts: the device
# correctness checks, every storage of a dense view at 1M x 1,024 (ours on the GPU beside plain torch
# references: the image has no Faiss), the host side with a null model on a GPU job's CPUs, then BGE-M3-large-shaped
# encoding with XLM-R's real tokenizer, ours (token budget and tokenizer workers swept) beside
# FlagEmbedding, and a bge-reranker-v2-m3-shaped cross-encoder beside FlagReranker, every child pinned to
# the CPUs a SLURM job would have. Every figure goes to $OUT.
#   on the GPU machine:  OUT=<folder> bash benchmarks/device_session.sh   (with .whl/ from fetch_wheels.sh)
#   the dry run here, with the image's package set only (what the machine has, plus .whl's wheels), which
#   also checks that the tree and .whl stay under 48 MiB (benchmarks/carry_size.py; a GPU session takes 64):
#     DEVICE=cpu CONFIG=tiny N=200 ROUNDS=1 IMAGE_CHECK=1 TOKENIZER=<folder> bash benchmarks/device_session.sh
#   (smaller still, as its smoke test runs it: STORAGE_N, STORAGE_QUERIES, STORAGE_ROUNDS, RERANK_PAIRS, and the
#   encoding sweep's TOKEN_BUDGETS and WORKERS, the first pair being the headline configuration, and the host
#   side's HOST_WORKERS)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
JOB_CPUS=${JOB_CPUS:-0-7}                       # a GPU encoding job's CPUs (scale.yaml: 6 workers + 2)
TOKENIZER=${TOKENIZER:-$WHEELS/xlmr-tokenizer}   # XLM-R's tokenizer (fetch_wheels.sh)
N=${N:-20000}
export PYTHONUNBUFFERED=1

if [ -n "${IMAGE_CHECK:-}" ]; then  # import only what the device image has, and the carried wheels
  export MIRACL_EVAL_IMAGE_CHECK=1
  MIRACL_EVAL_CARRIED=$(grep -v '^#' benchmarks/image/carried.txt | sed 's/==.*//' | tr '\n' ' ')
  export MIRACL_EVAL_CARRIED
  export PYTHONPATH="$PWD/benchmarks/image${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${IMAGE_CHECK:-}" ]; then  # the dry run here: what a device call with this carry would take
  "$PY" benchmarks/carry_size.py --limit-mib "${CARRY_LIMIT_MIB:-48}" "$WHEELS" | tee "$OUT/carry_size.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
fi
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  wheels=("$WHEELS"/*.whl)
  site=$(mktemp -d)
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}" || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
tokenizer_args=()
[ -f "$TOKENIZER/tokenizer.json" ] && tokenizer_args=(--tokenizer "$TOKENIZER")

{
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch, transformers, tokenizers, pyarrow, FlagEmbedding, importlib.metadata as m
print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "pyarrow", pyarrow.__version__,
      "FlagEmbedding", m.version("FlagEmbedding"))'
  echo "job CPUs $JOB_CPUS of $(nproc); tokenizer ${tokenizer_args[*]:-(trained on the sample)}"
} 2>&1 | tee "$OUT/env.txt"

timeout "${CHECKS_TIMEOUT:-150}" "$PY" benchmarks/gpu_checks.py --device "$DEVICE" >"$OUT/gpu_checks.log" 2>&1
checks=$?
grep -E '^(PASS|FAIL|SKIP|device|all|FAILED)' "$OUT/gpu_checks.log" | tee "$OUT/gpu_checks.txt"

# every storage of a dense view (float32, float16, int8, binary) at 1M x 1,024, 1,000 queries, top 1,000:
# ours on the device beside plain torch references, the first queries' scores against exact numpy
timeout "${STORAGE_TIMEOUT:-80}" "$PY" benchmarks/storage_search.py --device "$DEVICE" \
  --passages "${STORAGE_N:-1000000}" --queries "${STORAGE_QUERIES:-1000}" --rounds "${STORAGE_ROUNDS:-3}" >"$OUT/storage_search.log" 2>&1
storage=$?
grep -vE 'Warning|warn\(' "$OUT/storage_search.log" | tee "$OUT/storage_search.txt"

# the host side alone (null model): new pipeline, 1 and 6 tokenizer workers, on the job's CPUs
timeout "${HOST_TIMEOUT:-70}" "$PY" benchmarks/host_speed.py --baseline none --n "$N" --rounds 1 \
  --cpu-sets "$JOB_CPUS" --workers-list ${HOST_WORKERS:-1 6} "${tokenizer_args[@]}" >"$OUT/host_speed.log" 2>&1
host=$?
grep -vE 'it/s\]|Warning|warn\(' "$OUT/host_speed.log" | tee "$OUT/host_speed.txt"

# BGE-M3-large-shaped: ours (token budget 32768 with 6 workers first, then the sweep) and FlagEmbedding
timeout "${SPEED_TIMEOUT:-200}" "$PY" benchmarks/encode_speed.py --device "$DEVICE" --dtype bfloat16 \
  --config "${CONFIG:-large}" --n "$N" --batch-size 256 --max-length 512 --tokens 153 --cpus "$JOB_CPUS" \
  --token-budget ${TOKEN_BUDGETS:-32768 16384 65536 32768} --workers ${WORKERS:-6 6 6 2} --rounds "${ROUNDS:-1}" --skip-stream \
  "${tokenizer_args[@]}" >"$OUT/encode_speed.log" 2>&1
speed=$?
grep -vE 'it/s\]|Warning|warn\(' "$OUT/encode_speed.log" | tee "$OUT/encode_speed.txt"

# bge-reranker-v2-m3-shaped (XLM-R large, one label): ours beside FlagReranker, 1,024 tokens, bfloat16
timeout "${RERANK_TIMEOUT:-80}" "$PY" benchmarks/reranker_speed.py --device "$DEVICE" --dtype bfloat16 \
  --config "${CONFIG:-large}" --pairs "${RERANK_PAIRS:-4000}" --queries 40 --tokens 153 --max-length 1024 \
  --batch-size 64 --rounds 1 --cpus "$JOB_CPUS" "${tokenizer_args[@]}" >"$OUT/reranker_speed.log" 2>&1
rerank=$?
grep -vE 'it/s\]|Warning|warn\(' "$OUT/reranker_speed.log" | tee "$OUT/reranker_speed.txt"

echo "gpu_checks exit $checks, storage_search exit $storage, host_speed exit $host, encode_speed exit $speed," \
  "reranker_speed exit $rerank" | tee "$OUT/summary.txt"
exit $((checks != 0 || storage != 0 || host != 0 || speed != 0 || rerank != 0))
