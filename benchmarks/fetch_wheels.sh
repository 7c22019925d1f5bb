#!/usr/bin/env bash
# Download the wheels that benchmarks/device_session.sh installs on a GPU machine without internet.
# That machine's Python (3.12) already has torch, transformers, tokenizers, numpy and pyarrow; the
# FlagEmbedding reference and what its import needs travel as wheels. pyarrow comes too: datasets
# 5.x wants pyarrow >= 24, and the session installs it only when the machine's is older.
#   bash benchmarks/fetch_wheels.sh            # -> .whl/ (git-ignored), for Python 3.12
#   PYVER=3.11 DEST=/tmp/whl bash benchmarks/fetch_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
PY=${PYTHON:-python3}
tag=cp${PYVER/./}
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --abi "$tag" --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$DEST" \
  FlagEmbedding==1.4.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pyarrow==26.0.1
ls -l "$DEST"
