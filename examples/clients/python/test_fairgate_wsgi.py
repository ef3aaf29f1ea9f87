"""Unit tests of fairgate_wsgi's answers, with a stand-in for fairgate.

    python3 -m unittest -v    (in this directory)

clients_test.go runs them, and the app against the real fairgate.
"""

import http.server
import json
import threading
import unittest

from fairgate_wsgi import MAX_ROUTE, BadRequest, Client, Middleware, Unreachable


class Fake:
    """A Client that answers what it is given, recording each check."""

    def __init__(self, answer):
        self.answer, self.checks = answer, []

    def check(self, tenant, route, ip=None, cost=None):
        self.checks.append((tenant, route, ip))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("RateLimit-Limit", "stale")])
    return [b"ok"]


def call(mw, path="/orders/7", method="POST"):
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(mw({"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": "192.0.2.1", "app.tenant": "acme"},
                       start_response))
    return got["status"], got["headers"], body


def decision(status, headers, retry_after_ms=0, policy="free.tenant.1m"):
    return {"allowed": status == 200, "status": status, "reason": "x", "policy": policy,
            "retry_after_ms": retry_after_ms, "headers": headers, "decisions": []}


class Stub:
    """A stand-in fairgate on a real socket answering every check with
    status and a problem body, for Client's reading of statuses."""

    def __init__(self, status):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                body = json.dumps({"status": status, "detail": "refused as %d" % status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/problem+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_port

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class MiddlewareTest(unittest.TestCase):
    def mw(self, answer, **kw):
        self.fake = Fake(answer)
        return Middleware(app, self.fake, tenant_of=lambda environ: environ["app.tenant"], **kw)

    def test_allowed_adds_fairgates_headers_over_the_apps(self):
        status, headers, body = call(self.mw(decision(200, {"RateLimit-Limit": "3", "RateLimit-Remaining": "2"})))
        self.assertEqual((status, body), ("200 OK", b"ok"))
        self.assertEqual((headers["RateLimit-Limit"], headers["RateLimit-Remaining"]), ("3", "2"))
        self.assertEqual(self.fake.checks, [("acme", "POST /orders/7", "192.0.2.1")])

    def test_limited_is_429_with_retry_after(self):
        status, headers, body = call(self.mw(decision(429, {"Retry-After": "4", "RateLimit-Remaining": "0"}, 3500)))
        problem = json.loads(body)
        self.assertEqual(status, "429 Too Many Requests")
        self.assertEqual((headers["Retry-After"], headers["Content-Type"]), ("4", "application/problem+json"))
        self.assertEqual((problem["status"], problem["policy"], problem["retry_after_seconds"]), (429, "free.tenant.1m", 4))
        self.assertEqual(problem["type"], "urn:fairgate:problem:rate_limited")

    def test_retry_after_from_milliseconds_when_headers_lack_it(self):
        _, headers, _ = call(self.mw(decision(429, {}, 1001)))
        self.assertEqual(headers["Retry-After"], "2")

    def test_structured_headers_give_the_drafts_problem_type(self):
        _, _, body = call(self.mw(decision(429, {"Retry-After": "1", "RateLimit-Policy": '"p";q=3;w=30'}, 900)))
        self.assertEqual(json.loads(body)["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded")

    def test_store_out_failing_closed_is_503(self):
        status, headers, body = call(self.mw(decision(503, {"Retry-After": "5"}, 5000, policy="")))
        self.assertEqual((status, headers["Retry-After"]), ("503 Service Unavailable", "5"))
        self.assertEqual(json.loads(body)["code"], "rate_limiter_unavailable")

    def test_unreachable_open_serves_without_fairgates_headers(self):
        status, headers, body = call(self.mw(Unreachable("refused")))
        self.assertEqual((status, body, headers["RateLimit-Limit"]), ("200 OK", b"ok", "stale"))

    def test_unreachable_closed_is_503(self):
        status, headers, _ = call(self.mw(Unreachable("refused"), on_unreachable="closed"))
        self.assertEqual((status, headers["Retry-After"]), ("503 Service Unavailable", "5"))

    def test_bad_request_is_400_with_fairgates_reason(self):
        status, _, body = call(self.mw(BadRequest("route: an encoded slash")))
        self.assertEqual((status, json.loads(body)["detail"]), ("400 Bad Request", "route: an encoded slash"))

    def test_a_refused_check_is_never_served(self):
        # Any 4xx but 401/403 is the request's fault (413: a body over
        # fairgate's 64 KiB, which the client's path length controls):
        # answered 400, in either mode. Before, all but 400 failed open.
        for status in (400, 404, 405, 413, 414, 415, 422):
            for mode in ("open", "closed"):
                stub = Stub(status)
                try:
                    mw = Middleware(app, Client(stub.url), tenant_of=lambda environ: environ["app.tenant"],
                                    on_unreachable=mode)
                    with self.assertLogs("fairgate", "WARNING") if status != 400 else _nothing():
                        got, _, body = call(mw)
                finally:
                    stub.close()
                self.assertEqual((got, json.loads(body)["detail"]), ("400 Bad Request", "refused as %d" % status),
                                 "fairgate answering %d, failing %s" % (status, mode))

    def test_no_decision_follows_on_unreachable(self):
        # 401/403 (a wrong token) and 5xx: fairgate could not decide, and
        # the log says so (it said "unreachable" of a 401).
        for status in (401, 403, 500, 502, 503):
            stub = Stub(status)
            try:
                mws = [Middleware(app, Client(stub.url), tenant_of=lambda environ: environ["app.tenant"],
                                  on_unreachable=mode) for mode in ("open", "closed")]
                with self.assertLogs("fairgate", "WARNING") as logs:
                    opened, closed = call(mws[0]), call(mws[1])
            finally:
                stub.close()
            self.assertEqual((opened[0], opened[2]), ("200 OK", b"ok"), status)
            self.assertEqual(closed[0], "503 Service Unavailable", status)
            self.assertIn("fairgate could not decide (fairgate answered %d: refused as %d), failing open" % (status, status),
                          logs.output[0])
            self.assertIn("failing closed", logs.output[1])

    def test_a_route_over_the_bound_is_414_without_a_check(self):
        # '"' is quoted as %22: 2731 of them make a route over 8 KiB.
        status, _, body = call(self.mw(decision(200, {})), path="/orders/" + '"' * 2731)
        self.assertEqual((status, json.loads(body)["status"], self.fake.checks), ("414 Request-URI Too Long", 414, []))
        call(self.mw(decision(200, {})), path="/" + "x" * (MAX_ROUTE - len("POST /")))
        self.assertEqual(len(self.fake.checks), 1, "a route of MAX_ROUTE bytes is checked")

    def test_path_as_the_app_routes_it(self):
        call(self.mw(decision(200, {})), path="/caf\xc3\xa9 x", method="GET")  # WSGI's latin-1 of UTF-8
        self.assertEqual(self.fake.checks[0][1], "GET /caf%C3%A9%20x")

    def test_a_bad_setting_is_refused(self):
        with self.assertRaises(ValueError):
            Middleware(app, Fake(None), tenant_of=lambda e: None, on_unreachable="maybe")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    unittest.main()
