"""A small OpenID Connect provider for tests, served over real HTTP by uvicorn: discovery, an
authorization endpoint that logs in whoever the test says (``provider.user``) and redirects
back with a code, a token endpoint that checks the client's secret, the redirect URI and the
PKCE verifier, and answers an ID token signed (RS256, joserfc) with a key of its JWKS. A test
may make it misbehave: sign with a key it does not publish, name another audience, drop the
nonce."""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import uvicorn
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.procs import wait_for

CLIENT_ID = "beatflow-web"
CLIENT_SECRET = "provider-client-secret-0123456789"


@dataclass
class Provider:
    """The provider's state: the user the next login is, and what it gets wrong on purpose."""

    url: str = ""
    host_name: str = "127.0.0.1"  # "localhost": another site than the app's 127.0.0.1
    user: dict[str, Any] = field(default_factory=dict)
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, {"kid": "k1"}))
    rogue_key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, {"kid": "k1"}))
    sign_with_rogue_key: bool = False
    audience: str = CLIENT_ID
    drop_nonce: bool = False
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    server: uvicorn.Server | None = None

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self.discovery),
                Route("/authorize", self.authorize),
                Route("/token", self.token, methods=["POST"]),
                Route("/jwks", self.jwks),
            ]
        )

    async def discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.url,
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "jwks_uri": f"{self.url}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        if q.get("client_id") != CLIENT_ID or q.get("response_type") != "code":
            return JSONResponse({"error": "invalid_request"}, 400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request", "error_description": "PKCE"}, 400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "redirect_uri": q["redirect_uri"],
            "challenge": q["code_challenge"],
            "nonce": q.get("nonce"),
            "user": dict(self.user),
        }
        back = urlencode({"code": code, "state": q.get("state", "")})
        return RedirectResponse(f"{q['redirect_uri']}?{back}", status_code=302)

    async def token(self, request: Request) -> Response:
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, 401)
        form = await request.form()
        grant = self.codes.pop(str(form.get("code", "")), None)  # a code is good once
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return JSONResponse({"error": "invalid_grant"}, 400)
        verifier = str(form.get("code_verifier", ""))
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .decode()
            .rstrip("=")
        )
        if challenge != grant["challenge"]:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, 400)
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": self.audience,
            "iat": now,
            "exp": now + 300,
            "nonce": grant["nonce"],
            **grant["user"],
        }
        if self.drop_nonce:
            claims.pop("nonce")
        key = self.rogue_key if self.sign_with_rogue_key else self.key
        id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)
        return JSONResponse({"access_token": "at", "token_type": "Bearer", "id_token": id_token})

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(KeySet([self.key]).as_dict(private=False))

    def start(self) -> Provider:
        config = uvicorn.Config(
            self.app(), host="127.0.0.1", port=0, log_config=None, access_log=False
        )
        self.server = uvicorn.Server(config)
        threading.Thread(target=self.server.run, name="oidc", daemon=True).start()
        wait_for(lambda: self.server is not None and self.server.started, 30.0, 0.05, "oidc")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host_name}:{port}"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
