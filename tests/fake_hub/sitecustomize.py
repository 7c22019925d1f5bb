"""A stand-in for the Hugging Face hub in every Python process of a test run (on PYTHONPATH).

With ``MIRACL_EVAL_FAKE_HUB`` set to a folder, ``huggingface_hub``'s model lookup and snapshot
download serve the models found there (``org--name`` folders: the repository's ``main``; an
``org--name@rev`` folder: its revision ``rev``, a tag or branch) and log every call, with the
script that made it and the revision asked for, to ``calls.log`` in that folder; a model that is not
there fails as a gated one does, a revision that is not there as the hub's 404. ``main`` is commit
:data:`MAIN`; another revision's commit is the SHA-1 of ``{repo}@{rev}`` (:func:`commit_of`).
"""

import hashlib
import os
import re
import sys

FOLDER = os.environ.get("MIRACL_EVAL_FAKE_HUB")
MAIN = "0123456789abcdef0123456789abcdef01234567"


def commit_of(repo_id: str, revision: str) -> str:
    """The commit the fake hub says ``revision`` of ``repo_id`` names."""
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    return MAIN if revision == "main" else hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


if FOLDER:
    import shutil
    import types
    from pathlib import Path

    import huggingface_hub

    def _log(what: str, repo_id: str, revision: str) -> None:
        script = next((os.path.basename(a) for a in sys.argv if a.endswith(".py")), sys.argv[0])
        with open(Path(FOLDER) / "calls.log", "a", encoding="utf-8") as fh:
            fh.write(f"{what}\t{repo_id}\t{script}\t{revision}\n")

    def _source(repo_id: str, revision: str) -> Path:
        base = Path(FOLDER) / repo_id.replace("/", "--")
        if not base.is_dir():
            raise OSError(f"401 Client Error: access to model {repo_id} is restricted; you must be authenticated")
        revisions = {commit_of(repo_id, "main"): base}
        for folder in base.parent.glob(f"{base.name}@*"):
            revisions[commit_of(repo_id, folder.name.split("@", 1)[1])] = folder
        source = revisions.get(commit_of(repo_id, revision))
        if source is None:
            raise OSError(f"404 Client Error: Revision Not Found for url: .../{repo_id}/revision/{revision}")
        return source

    class FakeApi:
        def model_info(self, repo_id: str, revision: str = "main", **kwargs):
            _log("model_info", repo_id, revision)
            _source(repo_id, revision)
            return types.SimpleNamespace(sha=commit_of(repo_id, revision), id=repo_id)

    def fake_snapshot_download(repo_id: str, revision: str = "main", local_dir=None, **kwargs) -> str:
        _log("snapshot_download", repo_id, revision)
        source = _source(repo_id, revision or "main")
        target = Path(local_dir) if local_dir else Path(FOLDER) / "cache" / repo_id.replace("/", "--")
        shutil.copytree(source, target, dirs_exist_ok=True)
        return str(target)

    huggingface_hub.HfApi = FakeApi
    huggingface_hub.snapshot_download = fake_snapshot_download
