"""The frozen Settings model: every field is a ``BEATFLOW_<FIELD>`` variable, read by
:meth:`Settings.from_env`, which reports every bad value at once, and the masked view that
``repr`` and ``beatflow config show`` print."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from beatflow import celery_passthrough
from beatflow.errors import SettingsError
from beatflow.settings import accounts, source
from beatflow.settings import values as v
from beatflow.settings.source import PREFIX, variable
from beatflow.settings.values import MASK, FromText, is_secret, mask_url

RedisUrl = Annotated[str, FromText(v.redis_url)]
BrokerUrl = Annotated[str, FromText(v.broker_url)]
Port = Annotated[int, FromText(v.whole(1, 65535))]
# a path given in Python may be a Path (as the dataclass this was took it)
PathText = Annotated[
    str, BeforeValidator(lambda p: os.fspath(p) if isinstance(p, os.PathLike) else p)
]
Flag = Annotated[bool, FromText(v.flag)]


class Settings(BaseSettings):
    """Everything a beatflow process needs to know, validated once at start-up. Built in
    Python (``Settings(...)``, values taken as given) or from variables (:meth:`from_env`)."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="forbid")

    broker_url: BrokerUrl = "redis://127.0.0.1:6379/0"  # Redis or RabbitMQ (amqp://)
    # the Redis beatflow keeps its own state in (beat lock, schedules, results, leases, web
    # sessions); empty: broker_url, which must then be Redis (required with a RabbitMQ broker)
    redis_url: RedisUrl = ""
    result_backend_url: RedisUrl = ""  # empty: same as redis_url
    redbeat_url: RedisUrl = ""  # empty: same as redis_url
    # RabbitMQ only: classic queues are declared with x-max-priority (0: without); quorum
    # queues (no priorities on RabbitMQ 3.x) instead of classic ones
    rabbitmq_max_priority: Annotated[int, FromText(v.whole(0, 255))] = 10
    rabbitmq_quorum_queues: Flag = False
    database_url: Annotated[str, FromText(v.database_url)] = "sqlite:///.beatflow/beatflow.db"
    dags_folder: PathText = "dags"
    # plain Celery task modules (BEATFLOW_IMPORTS), see plain.py
    imports: Annotated[tuple[str, ...], NoDecode, FromText(v.module_names)] = ()
    queues: Annotated[tuple[str, ...], NoDecode, FromText(v.queue_names)] = ("default",)
    visibility_timeout: Annotated[int, FromText(v.whole(1))] = 3600
    unacked_restore_interval: Annotated[int, FromText(v.whole(1, 3600))] = 10  # sweep period, s
    # the longest countdown of one message (a retry's or a sensor's wait); a longer wait is
    # made of several (below RabbitMQ's consumer_timeout: execution/backoff.py)
    max_countdown_seconds: Annotated[float, FromText(v.seconds(1.0))] = 900.0
    task_soft_time_limit: Annotated[int, FromText(v.whole(1))] = 300
    task_time_limit: Annotated[int, FromText(v.whole(1))] = 360
    result_expires: Annotated[int, FromText(v.whole(60))] = 86_400
    result_max_bytes: Annotated[int, FromText(v.whole(1))] = 1 << 20
    lease_seconds: Annotated[float, FromText(v.seconds(1.0))] = 30.0
    # how long a task run's outcome write is retried in process while the results DB is down
    result_write_retry_seconds: Annotated[float, FromText(v.seconds(0.0))] = 60.0
    worker_disable_prefetch: Flag = False
    # the reconciler (a pass every interval by whichever worker holds its Redis lease)
    reconcile_enabled: Flag = True
    reconcile_interval: Annotated[float, FromText(v.seconds(0.5))] = 10.0
    # a running run silent this long is resumed
    reconcile_stall_seconds: Annotated[float, FromText(v.seconds(5.0))] = 60.0
    # then the run is failed (each resume waits twice as long)
    reconcile_max_resumes: Annotated[int, FromText(v.whole(0, 100))] = 5
    reconcile_batch: Annotated[int, FromText(v.whole(1, 10_000))] = 100  # runs per pass and kind
    beat_lock_timeout: Annotated[float, FromText(v.seconds(0.5))] = 2.0
    beat_renew_interval: Annotated[float, FromText(v.seconds(0.05))] = 0.5
    beat_loop_interval: Annotated[float, FromText(v.seconds(0.05))] = 0.5
    # a leader whose loop has not completed a pass for this long steps down (and is unhealthy)
    beat_stall_timeout: Annotated[float, FromText(v.seconds(1.0))] = 30.0
    # the beat's statement and connect timeout on the results DB
    beat_db_timeout: Annotated[float, FromText(v.seconds(0.5))] = 10.0
    schedule_sync_interval: Annotated[float, FromText(v.seconds(0.5))] = 10.0
    catchup_window: Annotated[int, FromText(v.whole(0))] = 86_400
    # tests only: a file holding seconds the beat's clock is shifted by
    test_clock_file: PathText = ""
    flower_user: str = "admin"
    flower_password: str = ""
    flower_port: Port = 5555
    flower_max_tasks: Annotated[int, FromText(v.whole(100))] = 10_000  # Flower's --max_tasks
    flower_max_workers: Annotated[int, FromText(v.whole(1))] = 500  # Flower's --max_workers
    # seconds; Flower forgets offline workers; 0: never
    flower_purge_offline_workers: Annotated[int, FromText(v.whole(0))] = 600
    metrics_port: Port = 9808
    web_port: Port = 8080
    web_user: str = "admin"
    web_password: str = ""  # required by `beatflow web`
    # comma-separated name:token pairs (bearer tokens for machines)
    web_tokens: Annotated[str, FromText(v.tokens)] = ""
    # more users: name:role:password-hash lines (`beatflow web hash-password`)
    web_users: Annotated[str, FromText(accounts.users_text)] = ""
    # API tokens with a role: name:role:token-hash lines (`beatflow web new-token`)
    web_token_hashes: Annotated[str, FromText(accounts.token_hashes_text)] = ""
    web_secret_key: str = ""  # session signing key; empty: random per process
    # a session unused this long ends
    web_session_idle_seconds: Annotated[int, FromText(v.whole(60))] = 3600
    # a session ends this long after its login anyway
    web_session_max_seconds: Annotated[int, FromText(v.whole(60))] = 43_200
    # optional OpenID Connect login: the provider's issuer URL (its discovery document under
    # /.well-known/openid-configuration) and this app's client there
    web_oidc_issuer: Annotated[str, FromText(v.http_url)] = ""
    web_oidc_client_id: str = ""
    web_oidc_client_secret: str = ""
    web_oidc_scopes: str = "openid profile email"
    # the ID token's claim naming the user, and the one holding roles or groups
    web_oidc_name_claim: str = "preferred_username"
    web_oidc_role_claim: str = "groups"
    # claim-value:role pairs; the highest role matched wins
    web_oidc_role_map: Annotated[str, FromText(accounts.role_map)] = ""
    # the role of a login no pair matches; empty: such a login is refused
    web_oidc_default_role: Annotated[str, FromText(accounts.role_or_empty)] = ""
    # Flower's address for task links; empty: this host, flower_port
    web_flower_url: Annotated[str, FromText(v.http_url)] = ""
    # per task run try; 0 turns log capture off
    task_log_max_bytes: Annotated[int, FromText(v.whole(0, 16 << 20))] = 65_536
    # `beatflow dags trigger` goes through this web API when set
    api_url: Annotated[str, FromText(v.http_url)] = ""
    api_token: str = ""
    log_format: Annotated[str, FromText(v.choice("auto", "json", "text"))] = "auto"
    log_level: Annotated[str, FromText(v.log_level)] = "INFO"
    instance: str = ""  # a name for this process in metrics/logs; empty: hostname
    # BEATFLOW_* variables that are no setting (kept for `beatflow config show`'s callers)
    extra: Mapping[str, str] = Field(default_factory=dict, repr=False)
    # Celery settings passed through (BEATFLOW_CELERY_<SETTING>, see celery_passthrough.py)
    celery_overrides: Mapping[str, Any] = Field(default_factory=dict)

    # ---------------------------------------------------------------- construction

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Settings(...) never reads os.environ behind the caller's back: from_env does
        return (init_settings,)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``BEATFLOW_*`` variables; report every bad value at once."""
        env = os.environ if environ is None else environ
        environ_source = source.Environ(cls, env)
        problems = list(environ_source.problems)
        values: dict[str, Any] = {}
        for name, raw in environ_source().items():
            try:
                values[name] = cls._parse(name, raw)
            except ValueError as exc:
                shown = MASK if is_secret(name) else mask_url(raw)
                problems.append(f"{variable(name)}={shown!r}: {exc}")
        values["celery_overrides"], celery_problems = celery_passthrough.parse(env)
        known = cls.variables()
        unknown = source.unknown_variables(env, known)
        values["extra"] = {k: env[k] for k in unknown}
        settings: Settings | None = None
        if not problems:
            try:
                settings = cls(**values)
            except ValidationError as exc:  # not expected: each value was parsed to its type
                problems.extend(_problem(error) for error in exc.errors())
        problems.extend(celery_problems)
        if problems or settings is None:
            raise SettingsError(problems)
        problems = settings.problems()
        if problems:
            raise SettingsError(problems)
        source.warn_unknown(unknown, known)
        return settings

    @classmethod
    def _parse(cls, name: str, raw: str) -> Any:
        """``raw`` text of field ``name``'s variable as the field's value (ValueError if bad)."""
        parse = next(
            (m.parse for m in cls.model_fields[name].metadata if isinstance(m, FromText)), v.text
        )
        return parse(raw)

    @classmethod
    def variables(cls) -> list[str]:
        """The fields a ``BEATFLOW_*`` variable sets."""
        return [n for n in cls.model_fields if n not in source.NOT_FROM_ENV]

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with ``changes`` applied, validated. TypeError for a name that is no
        field (as ``dataclasses.replace``)."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"Settings has no field {', '.join(map(repr, unknown))}")
        new = type(self)(**{**{n: getattr(self, n) for n in type(self).model_fields}, **changes})
        problems = new.problems()
        if problems:
            raise SettingsError(problems)
        return new

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to {name!r}: Settings are frozen")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete {name!r}: Settings are frozen")

    def __hash__(self) -> int:  # the mappings aside, as the dataclass this was hashed
        return hash(tuple(getattr(self, n) for n in self.variables()))

    def problems(self) -> list[str]:
        """Cross-field checks: each returned line names the variables and what to change."""
        from beatflow.settings.checks import problems

        return problems(self)

    # ---------------------------------------------------------------- derived values

    @property
    def default_queue(self) -> str:
        return self.queues[0]

    @property
    def broker_is_amqp(self) -> bool:
        """Whether the broker is RabbitMQ (an amqp://, amqps:// or pyamqp:// URL)."""
        from beatflow.connections import is_amqp

        return is_amqp(self.broker_url)

    @property
    def effective_redis_url(self) -> str:
        """The Redis of beatflow's own state: BEATFLOW_REDIS_URL, else the (Redis) broker."""
        return self.redis_url or self.broker_url

    @property
    def effective_result_backend_url(self) -> str:
        return self.result_backend_url or self.effective_redis_url

    @property
    def effective_redbeat_url(self) -> str:
        return self.redbeat_url or self.effective_redis_url

    @property
    def dags_path(self) -> Path:
        return Path(self.dags_folder)

    def masked(self) -> dict[str, Any]:
        """Every setting by variable name, secrets masked: what ``beatflow config show`` prints."""
        out: dict[str, Any] = {}
        for name in self.variables():
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, str):
                value = MASK if (is_secret(name) and value) else mask_url(value)
            out[variable(name)] = value
        for name, value in sorted(self.celery_overrides.items()):
            shown = mask_url(value) if isinstance(value, str) else value
            out[celery_passthrough.CELERY_PREFIX + name.upper()] = shown
        return out

    def __repr__(self) -> str:
        body = ", ".join(f"{k[len(PREFIX) :].lower()}={v!r}" for k, v in self.masked().items())
        return f"Settings({body})"

    __str__ = __repr__

    def celery_config(self) -> dict[str, Any]:
        """The Celery (and RedBeat) configuration: users never set these names themselves."""
        from beatflow.settings.celery import celery_config

        return celery_config(self)


def _problem(error: Any) -> str:
    """A pydantic error as a problem line, naming the variable."""
    return f"{variable(str(error['loc'][0]))}: {error['msg']}"


__all__ = ["Settings"]
