"""Error types. Every error a user can cause names the file and the line or record."""

from __future__ import annotations

from os import PathLike


class MiraclEvalError(Exception):
    """Base class of the errors this package raises on purpose."""


class InputError(MiraclEvalError):
    """A bad input file: the message names the file and, where known, the line or record."""

    def __init__(self, path: str | PathLike[str], message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str, int | None]]:  # picklable (a preloaded job's error)
        return type(self), (self.path, self.reason, self.line)


class ConfigError(MiraclEvalError):
    """A bad configuration value: the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.reason = message
        super().__init__(f"config key '{key}': {message}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # picklable (a preloaded job's error)
        return type(self), (self.key, self.reason)


class DownloadError(MiraclEvalError):
    """A download from the Hugging Face hub failed (for instance, no network)."""
