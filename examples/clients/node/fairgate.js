'use strict';
// Express-style middleware, (req, res, next), that asks fairgate before
// each request. Node 18 or later, no dependencies: copy this file.
//
//   const fairgate = require('./fairgate');
//   app.use(authenticate);                  // YOUR authentication sets req.user
//   app.use(fairgate({
//     url: 'http://127.0.0.1:8080',
//     token: process.env.FAIRGATE_TOKEN,
//     tenantOf: (req) => req.user.tenant,  // the verified tenant
//   }));
//
// For each request it sends fairgate's POST /v1/check the tenant your
// authentication verified (tenantOf), the route ("GET /path") and the
// client's address, then:
// - status 200 (allowed; also when fairgate's store is out and the route's
//   class fails open): next(), with fairgate's rate limit headers
//   (RateLimit-*, or the form fairgate's config names) set on the answer;
// - status 429 (over the limit) or 503 (fairgate's store is out and the
//   route's class fails closed): answered here with that status,
//   fairgate's headers (Retry-After among them) and a problem+json body;
// - fairgate could not decide: not reachable, too slow (timeoutMs), a
//   5xx, or 401/403 (a wrong token: the operator's mistake); onUnreachable
//   decides, 'open' (next(), no headers) or 'closed' (503 with
//   Retry-After: 5), and a warning is logged;
// - fairgate refuses the check as sent, any other 4xx (400: a path spelled
//   so that servers read it differently, such as an encoded slash; 413: a
//   body too large; 404, 415, 422...): the request's fault, never served:
//   400 with fairgate's reason (a status other than 400 is also logged, as
//   it may be a wrong url);
// - a route longer than MAX_ROUTE (8 KiB): 414, without asking fairgate
//   (a long route would make the check's body too large for fairgate,
//   whose 413 must not let the request through).
//
// The tenant must come from your own verified authentication (a session, a
// checked API key or token), never from a header the client sets.

const http = require('node:http');
const https = require('node:https');

// UNREACHABLE_RETRY_AFTER is the Retry-After, in seconds, of the 503 a
// middleware failing closed answers while fairgate cannot be asked: the
// value fairgate itself gives when its store is out.
const UNREACHABLE_RETRY_AFTER = 5;

// MAX_ROUTE is the longest route (method, space and the path as sent, in
// bytes) the middleware asks fairgate about; a longer one is answered 414
// without asking. fairgate refuses a check body over 64 KiB (413), and
// JSON doubles a '"' or '\\': 8 KiB keeps the body far below.
const MAX_ROUTE = 8192;

// BadRequest is fairgate refusing the check as sent: a 4xx other than 401
// and 403; message is its reason, status its status.
class BadRequest extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// fairgate returns the middleware. Options:
// - url: fairgate's base URL: its internal listener (--internal-listen)
//   when it runs as a proxy, else its --listen. Default http://127.0.0.1:8080.
// - token: fairgate's internal token (FAIRGATE_INTERNAL_TOKEN), sent as a
//   bearer token; none when fairgate has none.
// - tenantOf(req): the tenant your authentication verified, or null for an
//   anonymous request (fairgate then limits it per client address, on the
//   routes its config lists as anonymous). Required.
// - clientIp(req): the client's address; default the peer's, which behind
//   a load balancer is the balancer's: give one that reads its header.
// - timeoutMs: the whole check's deadline, default 250: above fairgate's
//   --store-timeout (100 ms), so that a slow store is answered by
//   fairgate's fail mode rather than this timeout.
// - onUnreachable: 'open' (default) or 'closed'.
// - logger: where warnings go (console by default).
function fairgate({
  url = 'http://127.0.0.1:8080', token, tenantOf, timeoutMs = 250, onUnreachable = 'open',
  clientIp = (req) => req.socket.remoteAddress, logger = console,
} = {}) {
  if (typeof tenantOf !== 'function') {
    throw new TypeError('fairgate: tenantOf is required: (req) => the tenant your authentication verified');
  }
  if (onUnreachable !== 'open' && onUnreachable !== 'closed') {
    throw new TypeError(`fairgate: onUnreachable ${JSON.stringify(onUnreachable)}: want 'open' or 'closed'`);
  }
  const endpoint = new URL('v1/check', url.endsWith('/') ? url : url + '/');
  const transport = endpoint.protocol === 'https:' ? https : http;
  // Keep-alive connections, each closed after 60 s idle: before fairgate
  // closes it (2 minutes).
  const agent = new transport.Agent({ keepAlive: true, timeout: 60_000 });
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;

  // post sends body and resolves to fairgate's status and text.
  function post(body, retried = false) {
    return new Promise((resolve, reject) => {
      const req = transport.request(endpoint, {
        method: 'POST', agent, signal: AbortSignal.timeout(timeoutMs),
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
      }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      });
      req.on('error', (err) => {
        // An idle connection fairgate closed (after 2 minutes, or to make
        // room) fails before any answer: once more on a new one.
        if (!retried && req.reusedSocket && err.code === 'ECONNRESET') {
          post(body, true).then(resolve, reject);
          return;
        }
        reject(err);
      });
      req.end(body);
    });
  }

  // check resolves to fairgate's decision on body (docs/openapi.json's
  // CheckResponse); it rejects with BadRequest or another error.
  async function check(body) {
    const { status, text } = await post(JSON.stringify(body));
    // The check as sent is refused (400, 413, 414, 415, 422...): the
    // request's fault, never a reason to serve it.
    if (status >= 400 && status < 500 && status !== 401 && status !== 403) {
      throw new BadRequest(detailOf(text), status);
    }
    if (status !== 200) throw new Error(`fairgate answered ${status}: ${detailOf(text)}`);
    return JSON.parse(text);
  }

  return async function fairgateMiddleware(req, res, next) {
    const body = { route: `${req.method} ${pathOf(req)}` };
    if (Buffer.byteLength(body.route) > MAX_ROUTE) {
      problem(res, 414, {}, {
        title: 'URI too long', detail: `the path is over ${MAX_ROUTE} bytes, the longest this service is rate limited for`,
      });
      return;
    }
    try {
      const tenant = tenantOf(req);
      if (tenant != null) body.tenant = String(tenant);
      const ip = clientIp(req);
      if (ip) body.ip = ip;
    } catch (err) {
      next(err); // the app's own functions failed: its error, not fairgate's
      return;
    }
    let d;
    try {
      d = await check(body);
    } catch (err) {
      if (err instanceof BadRequest) {
        if (err.status !== 400) logger.warn(`fairgate refused the check (${err.status}), answering 400: ${err.message}`);
        problem(res, 400, {}, { title: 'Bad request', detail: err.message });
        return;
      }
      logger.warn(`fairgate could not decide (${err.message}), failing ${onUnreachable}`);
      if (onUnreachable === 'open') {
        next();
        return;
      }
      problem(res, 503, { 'Retry-After': String(UNREACHABLE_RETRY_AFTER) }, {
        type: 'urn:fairgate:problem:rate_limiter_unavailable', title: 'Rate limiter unavailable',
        detail: 'the rate limiter cannot decide right now; retry later',
        code: 'rate_limiter_unavailable', retry_after_seconds: UNREACHABLE_RETRY_AFTER,
      });
      return;
    }
    if (d.status !== 200) {
      refuse(res, d);
      return;
    }
    for (const [name, value] of Object.entries(d.headers)) res.setHeader(name, value);
    next();
  };
}

// pathOf is the request's path as the app routes it (Express's
// originalUrl before a mounted router shortens url), without the query.
function pathOf(req) {
  const target = req.originalUrl || req.url;
  const q = target.indexOf('?');
  return q < 0 ? target : target.slice(0, q);
}

// refuse answers fairgate's 429 or 503 as fairgate's own proxy does.
function refuse(res, d) {
  const seconds = Math.max(1, Math.ceil(d.retry_after_ms / 1000));
  const headers = { ...d.headers };
  const has = (name) => Object.keys(headers).some((h) => h.toLowerCase() === name);
  if (!has('retry-after')) headers['Retry-After'] = String(seconds);
  if (d.status === 503) {
    problem(res, 503, headers, {
      type: 'urn:fairgate:problem:rate_limiter_unavailable', title: 'Rate limiter unavailable',
      detail: 'the rate limiter cannot decide right now and this route fails closed; retry later',
      code: 'rate_limiter_unavailable', retry_after_seconds: seconds,
    });
    return;
  }
  problem(res, d.status, headers, {
    type: has('ratelimit-policy') ? 'https://iana.org/assignments/http-problem-types#quota-exceeded'
      : 'urn:fairgate:problem:rate_limited',
    title: 'Too many requests',
    detail: `over the limit of policy ${d.policy}; retry after the time given`,
    policy: d.policy, retry_after_seconds: seconds,
  });
}

function problem(res, status, headers, body) {
  const data = JSON.stringify({ type: 'about:blank', ...body, status });
  res.writeHead(status, {
    ...headers, 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(data),
  });
  res.end(data);
}

function detailOf(text) {
  try {
    return String(JSON.parse(text).detail ?? '');
  } catch {
    return text.slice(0, 200);
  }
}

module.exports = fairgate;
module.exports.UNREACHABLE_RETRY_AFTER = UNREACHABLE_RETRY_AFTER;
module.exports.MAX_ROUTE = MAX_ROUTE;
