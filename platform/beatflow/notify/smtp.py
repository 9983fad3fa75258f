"""``SmtpNotifier``: a plain-text mail per event through an SMTP server (STARTTLS or SSL, login
optional). The password never sits in the DAG file: it is read when sending from an environment
variable, or from the file ``<VARIABLE>_FILE`` names (Docker and Kubernetes secrets)."""

from __future__ import annotations

import os
import smtplib
from collections.abc import Iterable, Mapping
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from beatflow.notify.base import DEFAULT_TRIES, Notifier, subject
from beatflow.notify.webhook import Text, render


def secret_from_env(variable: str) -> str | None:
    """The value of ``variable``, or the contents of the file ``<variable>_FILE`` names
    (trailing newline dropped); None when neither is set. Both set is an error."""
    value = os.environ.get(variable)
    path = os.environ.get(f"{variable}_FILE")
    if value and path:
        raise ValueError(f"{variable} and {variable}_FILE are both set: keep one")
    if path:
        return Path(path).read_text().rstrip("\r\n")
    return value or None


class SmtpNotifier(Notifier):
    """Mail the event from ``from_addr`` to ``to_addrs`` through ``host``:``port``.

    ``username`` logs in with the password read from ``password_env`` (or its ``_FILE``) at
    send time; ``starttls`` upgrades the connection, ``ssl`` connects with TLS from the start
    (port 465). ``subject`` and ``text`` are ``str.format`` templates over the context, or
    callables of it."""

    def __init__(
        self,
        host: str,
        port: int = 25,
        *,
        from_addr: str,
        to_addrs: str | Iterable[str],
        username: str | None = None,
        password_env: str = "SMTP_PASSWORD",
        starttls: bool = False,
        ssl: bool = False,
        subject: Text = None,
        text: Text = None,
        timeout: float = 10.0,
        tries: int = DEFAULT_TRIES,
    ) -> None:
        super().__init__(tries=tries)
        recipients = [to_addrs] if isinstance(to_addrs, str) else list(to_addrs)
        if not host or not recipients or not from_addr:
            raise ValueError("SmtpNotifier needs a host, a from_addr and at least one to_addr")
        if starttls and ssl:
            raise ValueError("SmtpNotifier: choose starttls or ssl, not both")
        self.host, self.port = host, int(port)
        self.from_addr, self.to_addrs = from_addr, recipients
        self.username, self.password_env = username, password_env
        self.starttls, self.ssl = starttls, ssl
        self.subject, self.text = subject, text
        self.timeout = float(timeout)

    def __repr__(self) -> str:  # no password, no user: only where the mail goes through
        return f"SmtpNotifier({self.host}:{self.port})"

    def mail(self, context: Mapping[str, Any]) -> EmailMessage:
        """The mail for ``context``."""
        mail = EmailMessage()
        mail["Subject"] = render(self.subject, context) if self.subject else subject(context)
        mail["From"] = self.from_addr
        mail["To"] = ", ".join(self.to_addrs)
        mail.set_content(render(self.text, context))
        return mail

    def notify(self, context: Mapping[str, Any]) -> None:
        mail = self.mail(context)
        smtp_class = smtplib.SMTP_SSL if self.ssl else smtplib.SMTP
        with smtp_class(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                password = secret_from_env(self.password_env)
                if password is None:
                    raise ValueError(
                        f"SmtpNotifier: {self.password_env} (or {self.password_env}_FILE) is not "
                        f"set; it holds the password of {self.username}"
                    )
                smtp.login(self.username, password)
            smtp.send_message(mail, from_addr=self.from_addr, to_addrs=self.to_addrs)
