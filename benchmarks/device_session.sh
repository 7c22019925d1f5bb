#!/usr/bin/env bash
# One GPU lease, one command (see benchmarks/README.md): the device correctness checks, then the
# encoder speed against FlagEmbedding, with every figure written to $OUT.
#   on the device tool:  bash benchmarks/device_session.sh        (carry: .whl, from fetch_wheels.sh)
#   a smoke run here:    DEVICE=cpu CONFIG=tiny N=400 ROUNDS=1 bash benchmarks/device_session.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$(mktemp -d)}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
export PYTHONUNBUFFERED=1

if compgen -G "$WHEELS/*.whl" >/dev/null; then
  wheels=("$WHEELS"/*.whl)
  if "$PY" -c 'import sys, pyarrow; sys.exit(int(pyarrow.__version__.split(".")[0]) < 24)' 2>/dev/null; then
    mapfile -t wheels < <(printf '%s\n' "${wheels[@]}" | grep -v '/pyarrow-')  # the machine's pyarrow will do
  fi
  site=$(mktemp -d)
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}" || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

{
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch, transformers, tokenizers, pyarrow, FlagEmbedding, importlib.metadata as m
print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__, "pyarrow", pyarrow.__version__, "FlagEmbedding", m.version("FlagEmbedding"))'
} 2>&1 | tee "$OUT/env.txt"

timeout "${CHECKS_TIMEOUT:-240}" "$PY" benchmarks/gpu_checks.py --device "$DEVICE" >"$OUT/gpu_checks.log" 2>&1
checks=$?
grep -E '^(PASS|FAIL|SKIP|device|all|FAILED)' "$OUT/gpu_checks.log" | tee "$OUT/gpu_checks.txt"

timeout "${SPEED_TIMEOUT:-330}" "$PY" benchmarks/encode_speed.py --device "$DEVICE" --dtype bfloat16 \
  --config "${CONFIG:-large}" --n "${N:-20000}" --batch-size "${BATCH:-256}" --max-length 512 --tokens 120 \
  --rounds "${ROUNDS:-3}" --skip-stream >"$OUT/encode_speed.log" 2>&1
speed=$?
grep -vE 'it/s\]|Warning|warn\(' "$OUT/encode_speed.log" | tee "$OUT/encode_speed.txt"

echo "gpu_checks exit $checks, encode_speed exit $speed" | tee "$OUT/summary.txt"
exit $((checks != 0 || speed != 0))
