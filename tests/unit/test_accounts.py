"""Users and API tokens of the settings: hashed secrets only (a password in clear, an unknown
role, a name twice, an scrypt cost meant to exhaust memory are refused at start, naming the
entry but never its content), read from a _FILE like the other secrets, masked by `config show`;
the CLI helpers read secrets from stdin, never argv, and write lines the settings take."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.errors import SettingsError
from beatflow.settings import Settings
from beatflow.settings.accounts import (
    Role,
    hash_password,
    hash_token,
    parse_token_hashes,
    parse_users,
    verify_password,
)


def test_a_password_hash_verifies_only_its_password() -> None:
    hashed = hash_password("a long passphrase")
    assert hashed.startswith("scrypt$32768$8$1$") and "a long passphrase" not in hashed
    assert verify_password("a long passphrase", hashed)
    assert not verify_password("a long passphrase ", hashed)
    assert hash_password("a long passphrase") != hashed  # salted
    assert not verify_password("x", "scrypt$garbage")
    with pytest.raises(ValueError, match="at least 8 characters"):
        hash_password("short")


def test_users_and_tokens_are_read_from_files_with_their_roles(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(
        "# who may log in\n"
        f"alice:operator:{hash_password('alice password')}\n\n"
        f"bob:viewer:{hash_password('bob password!')}\n"
    )
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ci:operator:{hash_token('t' * 40)}\n")
    s = Settings.from_env(
        {"BEATFLOW_WEB_USERS_FILE": str(users), "BEATFLOW_WEB_TOKEN_HASHES_FILE": str(tokens)}
    )
    assert [(u.name, u.role) for u in parse_users(s.web_users)] == [
        ("alice", Role.OPERATOR),
        ("bob", Role.VIEWER),
    ]
    assert [(t.name, t.role) for t in parse_token_hashes(s.web_token_hashes)] == [
        ("ci", Role.OPERATOR)
    ]
    shown = s.masked()
    assert shown["BEATFLOW_WEB_USERS"] == "****" and shown["BEATFLOW_WEB_TOKEN_HASHES"] == "****"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("alice:admin:hunter2-in-clear", "user entry 1 (alice): a password hash is scrypt$"),
        (f"alice:root:{hash_password('alice password')}", "unknown role 'root'"),
        ("alice:admin", "a password hash is scrypt$"),
        (f"al ice:admin:{hash_password('alice password')}", "expected name:role:hash"),
        ("alice:admin:scrypt$1048576$32$16$c2FsdHNhbHRzYWx0$a2V5a2V5a2V5a2V5a2V5a2V5", "memory"),
    ],
)
def test_a_bad_users_entry_stops_start_up_naming_it_but_not_its_secret(
    line: str, says: str
) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"BEATFLOW_WEB_USERS": line})
    assert "BEATFLOW_WEB_USERS" in str(err.value) and says in str(err.value)
    assert "hunter2" not in str(err.value)


def test_a_name_twice_a_clear_token_and_a_shadowed_first_user_are_refused() -> None:
    hashed = hash_password("alice password")
    with pytest.raises(SettingsError, match="appears twice"):
        Settings.from_env({"BEATFLOW_WEB_USERS": f"alice:viewer:{hashed}\nalice:admin:{hashed}"})
    with pytest.raises(SettingsError, match="a token hash is sha256"):
        Settings.from_env({"BEATFLOW_WEB_TOKEN_HASHES": "ci:viewer:0123456789abcdef0123"})
    with pytest.raises(SettingsError, match="is also a user of BEATFLOW_WEB_USERS"):
        Settings.from_env(
            {
                "BEATFLOW_WEB_USER": "alice",
                "BEATFLOW_WEB_PASSWORD": "pw",
                "BEATFLOW_WEB_USERS": f"alice:viewer:{hashed}",
            }
        )
    with pytest.raises(SettingsError, match="unknown role"):
        Settings.from_env({"BEATFLOW_WEB_OIDC_ROLE_MAP": "ops:superuser"})
    with pytest.raises(SettingsError, match="WEB_OIDC_CLIENT_ID"):
        Settings.from_env({"BEATFLOW_WEB_OIDC_ISSUER": "https://sso.example.com"})


def test_hash_password_reads_stdin_and_prints_a_line_the_settings_take() -> None:
    result = CliRunner().invoke(
        main,
        ["web", "hash-password", "--user", "alice", "--role", "operator"],
        input="alice's password\n",
    )
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert "alice's password" not in line
    [user] = parse_users(Settings.from_env({"BEATFLOW_WEB_USERS": line}).web_users)
    assert (user.name, user.role) == ("alice", Role.OPERATOR)
    assert verify_password("alice's password", user.secret_hash)
    short = CliRunner().invoke(main, ["web", "hash-password"], input="short\n")
    assert short.exit_code == 2 and "at least 8 characters" in short.stderr


def test_new_token_prints_the_token_once_and_only_its_hash_for_the_settings() -> None:
    result = CliRunner().invoke(main, ["web", "new-token", "--name", "ci", "--role", "viewer"])
    assert result.exit_code == 0, result.output
    token = result.stderr.strip().rsplit(" ", 1)[1]
    line = result.stdout.strip()
    assert token not in line and line == f"ci:viewer:{hash_token(token)}"
    given = CliRunner().invoke(
        main, ["web", "new-token", "--name", "ci", "--stdin"], input="x" * 20 + "\n"
    )
    assert given.stdout.strip() == f"ci:viewer:{hash_token('x' * 20)}"
