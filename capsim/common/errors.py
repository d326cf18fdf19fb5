"""Errors a user can cause.

Every error that bad input can trigger is a :class:`ScenarioError`. The CLI
prints ``str(err)`` as one line and exits with code 2 (no traceback).
"""

from __future__ import annotations

from pathlib import Path


class ScenarioError(Exception):
    """A user-caused error: bad scenario field, unknown name, unreadable file.

    Args:
        message: what is wrong and what would be valid.
        file: the file the value came from (scenario, trace, profile), if any.
        path: dotted YAML path of the offending field (``engine.block_size``), if any.
    """

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None):
        self.message = message
        self.file = file
        self.path = path
        super().__init__(self.__str__())

    def with_context(self, *, file: str | None = None, path: str | None = None) -> "ScenarioError":
        """Return a copy that also names ``file`` and/or prefixes ``path``."""
        new_path = self.path
        if path:
            new_path = f"{path}.{self.path}" if self.path else path
        return ScenarioError(self.message, file=self.file or file, path=new_path)

    def __str__(self) -> str:
        where = ": ".join(p for p in (self.file, self.path) if p)
        return f"{where}: {self.message}" if where else self.message


def read_text(path: Path, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a scenario, profile or config a user names).

    Raises:
        ScenarioError: unreadable, or not UTF-8 text (a binary or Latin-1 file), naming it.
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read {what}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                            f"at offset {exc.start}); save it as UTF-8", file=str(path)) from None
