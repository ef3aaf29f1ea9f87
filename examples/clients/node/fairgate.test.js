'use strict';
// Unit tests of fairgate.js's answers, against a stand-in for fairgate on
// node:http. `node --test` in this directory; clients_test.go runs them,
// and the app against the real fairgate.

const test = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const fairgate = require('./fairgate');

// fake serves answer (status, body) to each check, recording the bodies.
async function fake(status, answer) {
  const checks = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      checks.push({ auth: req.headers.authorization, body: JSON.parse(body) });
      res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, checks, close: () => server.close() };
}

// run passes one request through mw and resolves to what was answered.
function run(mw, { method = 'POST', url = '/orders/7?x=1' } = {}) {
  return new Promise((resolve) => {
    const headers = {};
    const res = {
      setHeader: (k, v) => { headers[k.toLowerCase()] = String(v); },
      writeHead: (status, hs) => {
        for (const [k, v] of Object.entries(hs)) headers[k.toLowerCase()] = String(v);
        res.status = status;
      },
      end: (data) => resolve({ status: res.status, headers, body: JSON.parse(data) }),
    };
    const req = { method, url, user: { tenant: 'acme' }, socket: { remoteAddress: '192.0.2.1' } };
    mw(req, res, (err) => resolve({ next: true, err, headers }));
  });
}

const decision = (status, headers, retryAfterMs = 0) => ({
  allowed: status === 200, status, reason: 'x', policy: 'free.tenant.1m', retry_after_ms: retryAfterMs, headers, decisions: [],
});

const options = (url, more) => ({ url, token: 'tok-0123456789abcdef', tenantOf: (req) => req.user.tenant, logger: { warn() {} }, ...more });

test('allowed: next() with fairgate\'s headers, the verified tenant and the token sent', async () => {
  const f = await fake(200, decision(200, { 'RateLimit-Limit': '3', 'RateLimit-Remaining': '2' }));
  const got = await run(fairgate(options(f.url)));
  f.close();
  assert.deepStrictEqual(got, { next: true, err: undefined, headers: { 'ratelimit-limit': '3', 'ratelimit-remaining': '2' } });
  assert.deepStrictEqual(f.checks, [{ auth: 'Bearer tok-0123456789abcdef', body: { route: 'POST /orders/7', tenant: 'acme', ip: '192.0.2.1' } }]);
});

test('limited: 429 with Retry-After and a problem body', async () => {
  const f = await fake(200, decision(429, { 'Retry-After': '4', 'RateLimit-Remaining': '0' }, 3500));
  const got = await run(fairgate(options(f.url)));
  f.close();
  assert.strictEqual(got.status, 429);
  assert.strictEqual(got.headers['retry-after'], '4');
  assert.strictEqual(got.headers['content-type'], 'application/problem+json');
  assert.deepStrictEqual([got.body.status, got.body.policy, got.body.retry_after_seconds, got.body.type],
    [429, 'free.tenant.1m', 4, 'urn:fairgate:problem:rate_limited']);
});

test('Retry-After from retry_after_ms when the headers lack it', async () => {
  const f = await fake(200, decision(429, {}, 1001));
  const got = await run(fairgate(options(f.url)));
  f.close();
  assert.strictEqual(got.headers['retry-after'], '2');
});

test('the store out, the class failing closed: 503', async () => {
  const f = await fake(200, decision(503, { 'Retry-After': '5' }, 5000));
  const got = await run(fairgate(options(f.url)));
  f.close();
  assert.deepStrictEqual([got.status, got.headers['retry-after'], got.body.code], [503, '5', 'rate_limiter_unavailable']);
});

test('a 400 from fairgate is 400 with its reason', async () => {
  const f = await fake(400, { status: 400, detail: 'route: an encoded slash' });
  const got = await run(fairgate(options(f.url)));
  f.close();
  assert.deepStrictEqual([got.status, got.body.detail], [400, 'route: an encoded slash']);
});

test('any other 4xx from fairgate is the request\'s fault: 400, never served, in either mode', async () => {
  // 413: a body over fairgate's 64 KiB, which the client's path length
  // controls. Before, everything but 400 failed open.
  for (const status of [400, 404, 405, 413, 414, 415, 422]) {
    const f = await fake(status, { status, detail: `refused as ${status}` });
    const warned = [];
    const logger = { warn: (m) => warned.push(m) };
    const open = await run(fairgate(options(f.url, { logger })));
    const closed = await run(fairgate(options(f.url, { logger, onUnreachable: 'closed' })));
    f.close();
    for (const got of [open, closed]) {
      assert.deepStrictEqual([got.next, got.status, got.body.detail], [undefined, 400, `refused as ${status}`], `fairgate answering ${status}`);
    }
    assert.strictEqual(warned.length, status === 400 ? 0 : 2, `warnings for ${status}: ${warned}`);
  }
});

test('no decision (401/403: a wrong token; 5xx): onUnreachable decides, and the log says fairgate could not decide', async () => {
  for (const status of [401, 403, 500, 502, 503]) {
    const f = await fake(status, { status, detail: 'no decision' });
    const warned = [];
    const logger = { warn: (m) => warned.push(m) };
    const open = await run(fairgate(options(f.url, { logger })));
    const closed = await run(fairgate(options(f.url, { logger, onUnreachable: 'closed' })));
    f.close();
    assert.deepStrictEqual(open, { next: true, err: undefined, headers: {} }, `fairgate answering ${status}`);
    assert.deepStrictEqual([closed.status, closed.headers['retry-after']], [503, '5'], `fairgate answering ${status}`);
    assert.deepStrictEqual(warned, [
      `fairgate could not decide (fairgate answered ${status}: no decision), failing open`,
      `fairgate could not decide (fairgate answered ${status}: no decision), failing closed`,
    ]);
  }
});

test('a route over MAX_ROUTE bytes is 414, fairgate not asked', async () => {
  const f = await fake(200, decision(200, {}));
  const mw = fairgate(options(f.url));
  const long = await run(mw, { url: '/orders/' + '"'.repeat(fairgate.MAX_ROUTE) });
  const longest = await run(mw, { url: '/' + 'x'.repeat(fairgate.MAX_ROUTE - 'POST /'.length) });
  f.close();
  assert.deepStrictEqual([long.status, long.body.status], [414, 414]);
  assert.strictEqual(longest.next, true);
  assert.strictEqual(f.checks.length, 1, 'only the route of MAX_ROUTE bytes is checked');
});

test('an error of tenantOf is the app\'s: next(err)', async () => {
  const boom = new Error('no session');
  const got = await run(fairgate(options('http://127.0.0.1:1', { tenantOf: () => { throw boom; } })));
  assert.strictEqual(got.err, boom);
});

test('bad settings are refused', () => {
  assert.throws(() => fairgate({}), /tenantOf is required/);
  assert.throws(() => fairgate({ tenantOf: () => 'a', onUnreachable: 'maybe' }), /want 'open' or 'closed'/);
});
