"""Reading ``BEATFLOW_*`` variables: pydantic-settings' environment source over a given mapping
(not only ``os.environ``), with ``<VAR>_FILE`` secrets read in, and the variables that are no
setting of ours said so once per process, with a did-you-mean."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource

from beatflow import celery_passthrough

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

log = logging.getLogger(__name__)

PREFIX = "BEATFLOW_"
# fields that no variable of their own sets (from_env fills them)
NOT_FROM_ENV = frozenset({"extra", "celery_overrides"})
# secrets that may also come from a file named by <VAR>_FILE (Docker/Kubernetes secrets); the
# URLs are here because they carry the Redis and PostgreSQL passwords
FILE_SETTINGS = frozenset(
    {
        "web_password",
        "web_tokens",
        "web_users",
        "web_token_hashes",
        "web_oidc_client_secret",
        "web_secret_key",
        "api_token",
        "flower_password",
        "broker_url",
        "redis_url",
        "result_backend_url",
        "redbeat_url",
        "database_url",
    }
)


def variable(name: str) -> str:
    """The variable that sets field ``name``: ``broker_url`` -> ``BEATFLOW_BROKER_URL``."""
    return PREFIX + name.upper()


class Environ(EnvSettingsSource):
    """The ``BEATFLOW_*`` entries of ``environ`` by field, as text; empty values are unset.
    A secret given both ways, or in a file that cannot be read, is a problem (in ``problems``)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []
        super().__init__(settings_cls, case_sensitive=False, env_prefix=PREFIX)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = {k: v for k, v in self.environ.items() if k.startswith(PREFIX)}
        for name in sorted(FILE_SETTINGS):
            var = variable(name)
            path = env.pop(var + "_FILE", "")
            if not path:
                continue
            if env.get(var):
                self.problems.append(f"{var} and {var}_FILE are both set: keep one")
                env.pop(var)
                continue
            try:
                env[var] = _read_secret_file(path)
            except ValueError as exc:
                self.problems.append(f"{var}_FILE={path!r}: {exc}")
        return {k.lower(): v for k, v in env.items() if v}  # as case_sensitive=False; empty: unset

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name in NOT_FROM_ENV:
            return None, field_name, False
        return super().get_field_value(field, field_name)


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """The ``BEATFLOW_*`` variables that set nothing (test and Celery pass-through ones aside)."""
    names = set(known)
    return sorted(
        k
        for k in environ
        if k.startswith(PREFIX)
        and k[len(PREFIX) :].lower() not in names
        and not (k.endswith("_FILE") and k[len(PREFIX) : -5].lower() in FILE_SETTINGS)
        and not k.startswith(PREFIX + "TEST_")
        and not k.startswith(celery_passthrough.CELERY_PREFIX)
    )


_warned: set[str] = set()


def warn_unknown(unknown: Iterable[str], known: Iterable[str]) -> None:
    """A misspelt variable is ignored, but said so (once per process), with a did-you-mean."""
    names = sorted(variable(n) for n in known)
    for var in unknown:
        if var in _warned:
            continue
        _warned.add(var)
        close = difflib.get_close_matches(var, names, n=1, cutoff=0.75)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        log.warning("%s is not a beatflow setting and is ignored%s", var, hint)


def _read_secret_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the secret file: {exc.__class__.__name__}") from None
