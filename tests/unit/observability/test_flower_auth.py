"""Flower's authentication default: basic auth from settings unless Flower's own auth is set,
and no start at all without any."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from beatflow.observability.flower import apply_auth_default
from beatflow.settings import Settings


def _options(**values: object) -> SimpleNamespace:
    return SimpleNamespace(**{"basic_auth": None, "auth": "", **values})


def test_basic_auth_comes_from_the_beatflow_settings_by_default() -> None:
    options = _options()
    apply_auth_default(options, Settings(flower_user="ops", flower_password="pw"))
    assert options.basic_auth == ["ops:pw"]


def test_flowers_own_basic_auth_or_oauth_is_left_alone() -> None:
    given = _options(basic_auth=["me:mine"])
    apply_auth_default(given, Settings(flower_password="pw"))
    assert given.basic_auth == ["me:mine"]
    oauth = _options(auth=".*@example\\.com$")
    apply_auth_default(oauth, Settings())
    assert oauth.basic_auth is None


def test_without_any_authentication_flower_refuses_to_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        apply_auth_default(_options(), Settings(flower_password=""))
    assert exc.value.code == 2
    assert "BEATFLOW_FLOWER_PASSWORD" in capsys.readouterr().err
