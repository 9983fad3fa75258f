"""Which Redis errors beatflow's broker transport retries as a lost connection: the server
refusing writes for a while, and nothing that retrying would only hide."""

from __future__ import annotations

import pytest
from redis import exceptions as e

from beatflow.broker_transport import Transport, WritesRefusedError, is_refusal

PIPELINE = "Command # 1 (ZREM unacked_index tag) of pipeline caused error: "


@pytest.mark.parametrize(
    "exc",
    [
        e.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        e.ReadOnlyError("You can't write against a read only replica."),
        e.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently"),
        e.ResponseError(PIPELINE + "MISCONF Redis is configured to save RDB snapshots"),
        e.ResponseError("NOREPLICAS Not enough good replicas to write."),
        WritesRefusedError("broker Redis refuses writes: ..."),
    ],
)
def test_a_write_refusal_is_retried_as_a_lost_connection(exc: Exception) -> None:
    assert is_refusal(exc)


@pytest.mark.parametrize(
    "exc",
    [
        e.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        e.ResponseError("ERR syntax error"),
        e.NoPermissionError("this user has no permissions to run the 'set' command"),
        e.NoScriptError("No matching script. Please use EVAL."),
        e.ResponseError("BUSY Redis is busy running a script."),
        e.ResponseError("the value mentions MISCONF later on"),
    ],
)
def test_a_lasting_error_is_not_a_refusal(exc: Exception) -> None:
    assert not is_refusal(exc)
    assert not isinstance(exc, Transport.connection_errors)


def test_the_refusals_redis_py_names_are_connection_errors_of_the_transport() -> None:
    for cls in (e.OutOfMemoryError, e.ReadOnlyError, WritesRefusedError):
        assert issubclass(cls, Transport.connection_errors)
    assert e.ResponseError not in Transport.connection_errors  # the rest stay channel errors
