"""WSGI middleware that asks fairgate before each request.

Standard library only, Python 3.9 or later. Copy this file into your app.

    from fairgate_wsgi import Client, Middleware

    app = Middleware(
        app,
        Client("http://127.0.0.1:8080", token=os.environ.get("FAIRGATE_TOKEN")),
        tenant_of=lambda environ: environ["myapp.tenant"],  # set by YOUR authentication
    )

For each request the middleware sends fairgate's POST /v1/check the
tenant your authentication verified (tenant_of), the route ("GET /path")
and the client's address, then:

- status 200 (allowed; also when fairgate's store is out and the route's
  class fails open): your app answers, with fairgate's rate limit headers
  (RateLimit-*, or the form fairgate's config names) added to its answer;
- status 429 (over the limit) or 503 (fairgate's store is out and the
  route's class fails closed): answered here with that status, fairgate's
  headers (Retry-After among them) and a problem+json body; your app is
  not called;
- fairgate could not decide: not reachable, too slow (timeout), a 5xx, or
  401/403 (a wrong token: the operator's mistake); on_unreachable decides,
  "open" (call your app, no headers) or "closed" (503 with Retry-After: 5),
  and a warning is logged;
- fairgate refuses the check as sent, any other 4xx (400: a path spelled
  so that servers read it differently, such as an encoded slash; 413: a
  body too large; 404, 415, 422...): the request's fault, never served:
  400 with fairgate's reason (a status other than 400 is also logged, as
  it may be a wrong url);
- a route longer than MAX_ROUTE (8 KiB): 414, without asking fairgate
  (a long route would make the check's body too large for fairgate,
  whose 413 must not let the request through).

The tenant must come from your own verified authentication (a session, a
checked API key or token), never from a header the client sets.
"""

import http.client
import json
import logging
import math
import threading
import time
import urllib.parse
from typing import Callable, Optional

log = logging.getLogger("fairgate")

# UNREACHABLE_RETRY_AFTER is the Retry-After, in seconds, of the 503 a
# middleware failing closed answers while fairgate cannot be asked: the
# value fairgate itself gives when its store is out.
UNREACHABLE_RETRY_AFTER = 5

# MAX_ROUTE is the longest route (method, space and the path as sent, in
# bytes) the middleware asks fairgate about; a longer one is answered 414
# without asking. fairgate refuses a check body over 64 KiB (413), and the
# path's encoding can triple its length: 8 KiB keeps the body far below.
MAX_ROUTE = 8192

# IDLE_SECONDS is how long an idle connection is kept: less than the 2
# minutes after which fairgate closes it.
IDLE_SECONDS = 60


class Unreachable(Exception):
    """fairgate could not decide: refused, timed out, a 5xx, 401/403 (a
    wrong token), or an answer that is not a decision."""


class BadRequest(Exception):
    """fairgate refused the check as sent: a 4xx other than 401 and 403.
    str() is its reason; status is fairgate's status."""

    def __init__(self, reason: str, status: int = 400):
        super().__init__(reason)
        self.status = status


class Client:
    """Asks fairgate's POST /v1/check over keep-alive connections.

    url is fairgate's base URL: its internal listener (--internal-listen)
    when it runs as a proxy, else its --listen. token is fairgate's
    internal token (FAIRGATE_INTERNAL_TOKEN), sent as a bearer token; None
    when fairgate has none. timeout bounds the connect and each read, in
    seconds: keep it above fairgate's --store-timeout (100 ms), so that a
    slow store is answered by fairgate's fail mode rather than this
    timeout. Safe for use from many threads: each check takes an idle
    connection from a small pool (or opens one) and gives it back.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None,
                 timeout: float = 0.25, max_idle: int = 16):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("fairgate: url %r: want http://host:port or https://host:port" % url)
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port
        self._path = u.path.rstrip("/") + "/v1/check"
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._timeout = timeout
        self._max_idle = max_idle
        self._idle = []  # (connection, when it went idle), the most recent last
        self._lock = threading.Lock()

    def check(self, tenant: Optional[str], route: str, ip: Optional[str] = None,
              cost: Optional[int] = None) -> dict:
        """Returns fairgate's decision (the JSON object of docs/openapi.json's CheckResponse).

        Raises Unreachable or BadRequest.
        """
        body = {"route": route}
        if tenant is not None:
            body["tenant"] = tenant
        if ip:
            body["ip"] = ip
        if cost is not None:
            body["cost"] = cost
        status, raw = self._post(json.dumps(body).encode())
        if 400 <= status < 500 and status not in (401, 403):
            # The check as sent is refused (400, 413, 414, 415, 422...):
            # the request's fault, never a reason to serve it.
            raise BadRequest(_detail(raw), status)
        if status != 200:
            raise Unreachable("fairgate answered %d: %s" % (status, _detail(raw)))
        try:
            return json.loads(raw)
        except ValueError as e:
            raise Unreachable("fairgate's answer is not JSON: %s" % e) from e

    def _post(self, data: bytes):
        for attempt in (1, 2):
            conn, reused = self._take()
            try:
                conn.request("POST", self._path, data, self._headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                # An idle connection fairgate closed (after 2 minutes, or
                # to make room) fails before any answer: once more on a
                # new one.
                if reused and attempt == 1:
                    continue
                raise Unreachable("fairgate at %s: %s" % (self._host, str(e) or type(e).__name__)) from e
            except (OSError, http.client.HTTPException) as e:  # refused, timed out, garbled
                conn.close()
                raise Unreachable("fairgate at %s: %s" % (self._host, str(e) or type(e).__name__)) from e
            if resp.will_close:
                conn.close()
            else:
                self._give_back(conn)
            return resp.status, raw
        raise AssertionError("unreachable")

    def _take(self):
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if time.monotonic() - since < IDLE_SECONDS:
                    return conn, True
                conn.close()
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout), False

    def _give_back(self, conn):
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()


class Middleware:
    """WSGI middleware deciding each request with fairgate (see the module's doc).

    tenant_of(environ) returns the tenant your authentication verified, or
    None for an anonymous request (fairgate then limits it per client
    address, on the routes its config lists as anonymous). client_ip(environ)
    returns the client's address: REMOTE_ADDR by default, which behind a
    load balancer is the balancer's; give your own that reads the header
    your balancer sets. on_unreachable is "open" or "closed".
    """

    def __init__(self, app, client: Client, tenant_of: Callable[[dict], Optional[str]],
                 on_unreachable: str = "open",
                 client_ip: Callable[[dict], Optional[str]] = lambda environ: environ.get("REMOTE_ADDR")):
        if on_unreachable not in ("open", "closed"):
            raise ValueError("fairgate: on_unreachable %r: want \"open\" or \"closed\"" % on_unreachable)
        self.app, self.client, self.tenant_of = app, client, tenant_of
        self.on_unreachable, self.client_ip = on_unreachable, client_ip

    def __call__(self, environ, start_response):
        # The path as your app routes it (WSGI has already decoded it).
        path = urllib.parse.quote((environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1"),
                                  safe="/;=,:@!$&'()*+~") or "/"
        route = environ["REQUEST_METHOD"] + " " + path
        if len(route) > MAX_ROUTE:
            return _problem(start_response, 414, [], {
                "title": "URI too long",
                "detail": "the path is over %d bytes, the longest this service is rate limited for" % MAX_ROUTE})
        try:
            d = self.client.check(self.tenant_of(environ), route, self.client_ip(environ))
        except BadRequest as e:
            if e.status != 400:
                log.warning("fairgate refused the check (%d), answering 400: %s", e.status, e)
            return _problem(start_response, 400, [], {"title": "Bad request", "detail": str(e)})
        except Unreachable as e:
            log.warning("fairgate could not decide (%s), failing %s", e, self.on_unreachable)
            if self.on_unreachable == "open":
                return self.app(environ, start_response)
            return _problem(start_response, 503, [("Retry-After", str(UNREACHABLE_RETRY_AFTER))], {
                "type": "urn:fairgate:problem:rate_limiter_unavailable", "title": "Rate limiter unavailable",
                "detail": "the rate limiter cannot decide right now; retry later",
                "code": "rate_limiter_unavailable", "retry_after_seconds": UNREACHABLE_RETRY_AFTER})

        headers = list(d["headers"].items())
        if d["status"] != 200:
            return _refuse(start_response, d, headers)
        names = {name.lower() for name, _ in headers}

        def start_with_headers(status, app_headers, exc_info=None):
            kept = [h for h in app_headers if h[0].lower() not in names]
            return start_response(status, kept + headers, exc_info)

        return self.app(environ, start_with_headers)


def _refuse(start_response, d, headers):
    """Answers fairgate's 429 or 503 as fairgate's own proxy does."""
    seconds = max(1, math.ceil(d["retry_after_ms"] / 1000))
    if not any(name.lower() == "retry-after" for name, _ in headers):
        headers.append(("Retry-After", str(seconds)))
    if d["status"] == 503:
        body = {"type": "urn:fairgate:problem:rate_limiter_unavailable", "title": "Rate limiter unavailable",
                "detail": "the rate limiter cannot decide right now and this route fails closed; retry later",
                "code": "rate_limiter_unavailable", "retry_after_seconds": seconds}
    else:
        structured = any(name.lower() == "ratelimit-policy" for name, _ in headers)
        body = {"type": "https://iana.org/assignments/http-problem-types#quota-exceeded" if structured
                else "urn:fairgate:problem:rate_limited",
                "title": "Too many requests",
                "detail": "over the limit of policy %s; retry after the time given" % d["policy"],
                "policy": d["policy"], "retry_after_seconds": seconds}
    return _problem(start_response, d["status"], headers, body)


def _problem(start_response, status, headers, body):
    body = dict(body, status=status)
    body.setdefault("type", "about:blank")
    data = json.dumps(body).encode()
    start_response("%d %s" % (status, http.client.responses.get(status, "")),
                   headers + [("Content-Type", "application/problem+json"), ("Content-Length", str(len(data)))])
    return [data]


def _detail(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("detail", ""))
    except (ValueError, AttributeError):
        return raw[:200].decode("utf-8", "replace")
