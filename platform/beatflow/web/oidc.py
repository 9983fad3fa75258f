"""Optional login through an OpenID Connect provider (BEATFLOW_WEB_OIDC_*): the authorization
code flow with PKCE, state and nonce; the ID token's signature (the provider's JWKS), issuer,
audience, expiry and nonce checked by joserfc; the role read from a claim through
BEATFLOW_WEB_OIDC_ROLE_MAP. The provider's discovery document and keys are fetched on first
use (the app starts while the provider is down) and the keys again when a token names a key
they lack (the provider rotated them)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from beatflow.settings import Settings
from beatflow.settings.accounts import NAME_RE, Role, parse_role_map
from beatflow.web.limits import ApiError

STATE_COOKIE = "bf_oidc"
STATE_SALT = "beatflow-oidc-state"
STATE_SECONDS = 600  # a login at the provider must come back within this
HTTP_TIMEOUT = 10.0
MAX_DOCUMENT_BYTES = 1 << 20
LEEWAY_SECONDS = 60

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OidcLogin:
    """Who the provider says logged in, and the role the claim maps to."""

    name: str
    role: Role


class OidcClient:
    """beatflow as a client of one OIDC provider."""

    def __init__(self, settings: Settings, secret_key: str) -> None:
        self.issuer = settings.web_oidc_issuer.rstrip("/")
        self.client_id = settings.web_oidc_client_id
        self.client_secret = settings.web_oidc_client_secret
        self.scopes = settings.web_oidc_scopes
        self.name_claim = settings.web_oidc_name_claim
        self.role_claim = settings.web_oidc_role_claim
        self.role_map = parse_role_map(settings.web_oidc_role_map)
        self.default_role = (
            Role.parse(settings.web_oidc_default_role) if settings.web_oidc_default_role else None
        )
        self._signer = URLSafeTimedSerializer(secret_key, salt=STATE_SALT)
        self._lock = threading.RLock()
        self._metadata: dict[str, Any] | None = None
        self._keys: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the provider

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if self._metadata is None:
                doc = _get_json(f"{self.issuer}/.well-known/openid-configuration")
                if doc.get("issuer", "").rstrip("/") != self.issuer:
                    raise ApiError(502, "the OIDC provider's discovery names another issuer")
                for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                    if not isinstance(doc.get(key), str):
                        raise ApiError(502, f"the OIDC provider's discovery has no {key}")
                self._metadata = doc
            return self._metadata

    def _key_set(self, refresh: bool = False) -> Any:
        from joserfc.jwk import KeySet

        with self._lock:
            if self._keys is None or refresh:
                self._keys = _get_json(self.metadata_uri("jwks_uri"))
            return KeySet.import_key_set(self._keys)  # type: ignore[arg-type]

    def metadata_uri(self, key: str) -> str:
        uri: str = self.metadata()[key]
        return uri

    # ------------------------------------------------------------------ the flow

    def start(self, redirect_uri: str, next_url: str) -> tuple[str, str]:
        """(the provider's authorization URL, the signed state cookie's value)."""
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": redirect_uri,
                "scope": self.scopes,
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        endpoint = self.metadata_uri("authorization_endpoint")
        cookie = self._signer.dumps(
            {"state": state, "nonce": nonce, "verifier": verifier, "next": next_url}
        )
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", cookie

    def finish(
        self, cookie: str | None, state: str, code: str, redirect_uri: str
    ) -> tuple[OidcLogin, str]:
        """The login the provider's answer proves, and where to go next; 403 for anything
        forged, replayed, expired or unmapped."""
        try:
            saved = self._signer.loads(cookie or "", max_age=STATE_SECONDS)
        except BadSignature:  # SignatureExpired too
            raise ApiError(403, "the single sign-on login expired or began elsewhere") from None
        if not isinstance(saved, dict) or not hmac.compare_digest(
            str(saved.get("state", "")).encode(), state.encode()
        ):
            raise ApiError(403, "the single sign-on answer does not match this login (state)")
        tokens = self._exchange(code, redirect_uri, str(saved["verifier"]))
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise ApiError(502, "the OIDC provider answered no id_token")
        claims = self._verify(id_token, str(saved["nonce"]))
        return self._login_of(claims), str(saved.get("next", "/"))

    def _exchange(self, code: str, redirect_uri: str, verifier: str) -> dict[str, Any]:
        body = urllib.parse.urlencode(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": verifier,
                "client_id": self.client_id,
            }
        ).encode()
        basic = base64.b64encode(
            f"{urllib.parse.quote(self.client_id)}:{urllib.parse.quote(self.client_secret)}".encode()
        ).decode()
        request = urllib.request.Request(
            self.metadata_uri("token_endpoint"),
            data=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "Authorization": f"Basic {basic}",
            },
            method="POST",
        )
        return _fetch_json(request, "token")

    def _verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            header = json.loads(_unb64(id_token.split(".")[0]))
            kid = header.get("kid") if isinstance(header, dict) else None
            keys = self._key_set()
            if kid is not None and all(k.kid != kid for k in keys.keys):
                keys = self._key_set(refresh=True)  # the provider rotated its keys
            token = jwt.decode(id_token, keys, algorithms=["RS256", "ES256", "PS256", "EdDSA"])
            jwt.JWTClaimsRegistry(
                leeway=LEEWAY_SECONDS,
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.client_id},
                exp={"essential": True},
                sub={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(token.claims)
        except (JoseError, ValueError, IndexError) as exc:
            log.warning("OIDC login refused: %s", exc)
            raise ApiError(403, f"the single sign-on ID token is not valid: {exc}") from None
        claims: dict[str, Any] = token.claims
        azp = claims.get("azp")
        if azp is not None and azp != self.client_id:
            raise ApiError(403, "the single sign-on ID token was issued to another client")
        return claims

    def _login_of(self, claims: dict[str, Any]) -> OidcLogin:
        name = claims.get(self.name_claim) or claims.get("sub")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ApiError(403, f"the ID token's {self.name_claim} claim is not a usable user name")
        values = claims.get(self.role_claim, [])
        values = [values] if isinstance(values, str) else values
        roles = [self.role_map[v] for v in values if isinstance(v, str) and v in self.role_map]
        role = max(roles) if roles else self.default_role
        if role is None:
            raise ApiError(
                403,
                f"{name} has no beatflow role: none of their {self.role_claim} is in "
                "BEATFLOW_WEB_OIDC_ROLE_MAP (ask an admin)",
            )
        return OidcLogin(name, role)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _get_json(url: str) -> dict[str, Any]:
    return _fetch_json(urllib.request.Request(url, headers={"Accept": "application/json"}), url)


def _fetch_json(request: urllib.request.Request, what: str) -> dict[str, Any]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            raw = response.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode(errors="replace")
        raise ApiError(502, f"the OIDC provider refused ({what}): {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiError(503, f"the OIDC provider is unreachable ({what}): {exc}") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ApiError(502, f"the OIDC provider's answer ({what}) is over 1 MiB")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ApiError(502, f"the OIDC provider's answer ({what}) is not JSON") from None
    if not isinstance(data, dict):
        raise ApiError(502, f"the OIDC provider's answer ({what}) is not a JSON object")
    log.debug("OIDC %s answered in %.3f s", what, time.monotonic() - started)
    return data
