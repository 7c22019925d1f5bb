"""A stand-in for the Hugging Face hub in every Python process of a test run (on PYTHONPATH).

With ``MIRACL_EVAL_FAKE_HUB`` set to a folder, ``huggingface_hub``'s model lookup and snapshot
download serve the models found there (``org--name`` folders) and log every call, with the script
that made it, to ``calls.log`` in that folder; a model that is not there fails as a gated one does.
"""

import os
import sys

FOLDER = os.environ.get("MIRACL_EVAL_FAKE_HUB")

if FOLDER:
    import shutil
    import types
    from pathlib import Path

    import huggingface_hub

    def _log(what: str, repo_id: str) -> None:
        script = next((os.path.basename(a) for a in sys.argv if a.endswith(".py")), sys.argv[0])
        with open(Path(FOLDER) / "calls.log", "a", encoding="utf-8") as fh:
            fh.write(f"{what}\t{repo_id}\t{script}\n")

    def _source(repo_id: str) -> Path:
        source = Path(FOLDER) / repo_id.replace("/", "--")
        if not source.is_dir():
            raise OSError(f"401 Client Error: access to model {repo_id} is restricted; you must be authenticated")
        return source

    class FakeApi:
        def model_info(self, repo_id: str, revision: str = "main", **kwargs):
            _log("model_info", repo_id)
            _source(repo_id)
            return types.SimpleNamespace(sha="0123456789abcdef0123456789abcdef01234567", id=repo_id)

    def fake_snapshot_download(repo_id: str, revision: str = "main", local_dir=None, **kwargs) -> str:
        _log("snapshot_download", repo_id)
        source = _source(repo_id)
        target = Path(local_dir) if local_dir else Path(FOLDER) / "cache" / repo_id.replace("/", "--")
        shutil.copytree(source, target, dirs_exist_ok=True)
        return str(target)

    huggingface_hub.HfApi = FakeApi
    huggingface_hub.snapshot_download = fake_snapshot_download
