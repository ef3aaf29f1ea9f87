'use strict';
// A tiny app limited by fairgate, on node:http with Express-style
// (req, res, next) handlers; with Express, app.use each handler instead.
//
//   FAIRGATE_URL=http://127.0.0.1:8080 node app.js
//   curl -i -H 'Authorization: Bearer token-a' http://127.0.0.1:3000/hello
//
// Settings, from the environment: FAIRGATE_URL (http://127.0.0.1:8080),
// FAIRGATE_TOKEN (fairgate's internal token, if it has one),
// FAIRGATE_ON_UNREACHABLE (open or closed; open), FAIRGATE_TIMEOUT_MS (250),
// PORT (3000; 0 picks a free one). It prints "listening on
// http://HOST:PORT" once it listens.

const http = require('node:http');
const fairgate = require('./fairgate');

// The app's own users: an API token to the tenant it belongs to. A real
// app checks a session, a hashed API key or a signed token here.
const TOKENS = new Map([['token-a', 'tenant-a'], ['token-b', 'tenant-b']]);

// authenticate is the app's own authentication: 401 without a known token,
// else the verified tenant in req.user for the handlers after it.
function authenticate(req, res, next) {
  const [scheme, token] = (req.headers.authorization || '').split(' ');
  const tenant = scheme && scheme.toLowerCase() === 'bearer' ? TOKENS.get(token) : undefined;
  if (!tenant) {
    res.writeHead(401, { 'Content-Type': 'text/plain', 'WWW-Authenticate': 'Bearer' });
    res.end('unknown token\n');
    return;
  }
  req.user = { tenant };
  next();
}

// api is the API itself: it says whom it served.
function api(req, res) {
  res.setHeader('Content-Type', 'application/json');
  res.end(JSON.stringify({ tenant: req.user.tenant, path: req.url }));
}

const handlers = [
  authenticate,
  fairgate({
    url: process.env.FAIRGATE_URL || 'http://127.0.0.1:8080',
    token: process.env.FAIRGATE_TOKEN,
    timeoutMs: Number(process.env.FAIRGATE_TIMEOUT_MS || 250),
    onUnreachable: process.env.FAIRGATE_ON_UNREACHABLE || 'open',
    // The tenant authenticate verified, never a header the client sends.
    tenantOf: (req) => req.user.tenant,
  }),
  api,
];

// serve runs the handlers in order, as Express does: each calls next() to
// pass on, or answers.
function serve(req, res) {
  let i = 0;
  const next = (err) => {
    if (err) {
      console.error(err);
      res.writeHead(500).end();
      return;
    }
    const h = handlers[i++];
    if (h) h(req, res, next);
  };
  next();
}

const server = http.createServer(serve);
server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
