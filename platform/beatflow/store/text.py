"""Text as the database accepts it: errors and tracebacks are sanitised before they are written
(NUL bytes, which PostgreSQL refuses in text, are replaced and sizes are capped), so recording a
failure can never itself fail on what the error says."""

from __future__ import annotations

ERROR_MAX_CHARS = 10_000
TRACEBACK_MAX_CHARS = 100_000


def clean_text(text: str | None, limit: int) -> str | None:
    """``text`` as the database accepts it: NUL bytes shown as ``\\x00``, at most ``limit``
    characters (the cut is said)."""
    if text is None:
        return None
    text = text.replace("\x00", "\\x00")
    if len(text) > limit:
        cut = f"... [{len(text) - limit} more characters cut]"
        text = text[: max(0, limit - len(cut))] + cut
    return text
