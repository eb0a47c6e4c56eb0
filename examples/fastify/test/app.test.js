'use strict';
// The Fastify example over real HTTP on 127.0.0.1: a flood gets 429 with
// Retry-After, tenants are separate, an invalid JWT is 401, and the slots of
// aborted requests come back (active permits 0 in getStats).

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const { ResourceBroker } = require('@pressure-rs/broker');
const { buildApp } = require('../app');

const SECRET = crypto.randomBytes(24).toString('hex');

function jwt(claims, secret = SECRET, alg = 'HS256') {
  const b64 = (x) => Buffer.from(JSON.stringify(x)).toString('base64url');
  const head = b64({ alg, typ: 'JWT' });
  const body = b64({ exp: Math.floor(Date.now() / 1000) + 3600, ...claims });
  const sig = alg === 'none' ? '' : crypto.createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

function request(base, path, { method = 'GET', token, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const headers = token ? { authorization: `Bearer ${token}` } : {};
    const req = http.request(`${base}${path}`, { method, headers, agent }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.end();
  });
}

async function start(t, options) {
  const broker = new ResourceBroker();
  const app = buildApp(broker, options);
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  t.after(() => app.close());
  return { broker, base };
}

async function active(broker, resource) {
  return (await broker.getStats()).find((s) => s.resource === resource).active;
}

async function waitFor(what, check, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('a flood gets 429 with Retry-After from the route limit, before auth', async (t) => {
  const { base, broker } = await start(t, {
    routes: [{ prefix: '/webhooks/github', resource: 'gateway:route:webhooks-github', limits: { requestsPerMinute: 5 } }],
    tenant: { secret: SECRET, limits: { requestsPerMinute: 100 } },
  });
  const answers = [];
  for (let i = 0; i < 8; i++) answers.push(await request(base, '/webhooks/github', { method: 'POST' }));
  assert.deepEqual(
    answers.map((a) => a.status),
    [200, 200, 200, 200, 200, 429, 429, 429],
  );
  for (const a of answers.slice(5)) {
    assert.ok(Number(a.headers['retry-after']) >= 1, `retry-after ${a.headers['retry-after']}`);
    assert.equal(JSON.parse(a.body).error.type, 'rate_limited');
  }
  // Refused before auth: an invalid token on a flooded route is still a 429.
  assert.equal((await request(base, '/webhooks/github', { method: 'POST', token: 'garbage' })).status, 429);
  const s = (await broker.getStats()).find((x) => x.resource === 'gateway:route:webhooks-github');
  assert.equal(s.allowed, 5);
  assert.equal(s.denied, 4);
});

test('tenants have separate quotas', async (t) => {
  const { base } = await start(t, { tenant: { secret: SECRET, limits: { requestsPerMinute: 3 } } });
  const acme = jwt({ namespaceId: 'acme' });
  const globex = jwt({ namespaceId: 'globex' });
  const a = [];
  for (let i = 0; i < 4; i++) a.push((await request(base, '/api/hello', { token: acme })).status);
  assert.deepEqual(a, [200, 200, 200, 429]);
  const g = await request(base, '/api/hello', { token: globex });
  assert.equal(g.status, 200);
  assert.equal(JSON.parse(g.body).hello, 'globex');
  // Anonymous requests (auth not required) skip the tenant layer.
  assert.equal((await request(base, '/api/hello')).status, 200);
});

test('an invalid JWT is 401', async (t) => {
  const { base } = await start(t, { tenant: { secret: SECRET, limits: { requestsPerMinute: 100 } } });
  const bad = [
    jwt({ namespaceId: 'acme' }, 'another secret'),
    jwt({ namespaceId: 'acme' }, SECRET, 'none'),
    jwt({ namespaceId: 'acme', exp: 1 }),
    'not.a.jwt',
  ];
  for (const token of bad) {
    const r = await request(base, '/api/hello', { token });
    assert.equal(r.status, 401, token);
    assert.equal(JSON.parse(r.body).error.type, 'unauthorized');
  }
  const required = await start(t, { tenant: { secret: SECRET, required: true, limits: { requestsPerMinute: 100 } } });
  assert.equal((await request(required.base, '/api/hello')).status, 401);
});

test('slots are released when clients abort, exactly once', async (t) => {
  const resource = 'gateway:service:api';
  const { base, broker } = await start(t, {
    routes: [{ prefix: '/api', resource, limits: { maxConcurrentRequests: 3 } }],
    tenant: { secret: SECRET, limits: { maxConcurrentRequests: 2 } },
  });
  const token = jwt({ namespaceId: 'acme' });
  // Two slow requests hold a route slot and a tenant slot each.
  const reqs = [];
  for (let i = 0; i < 2; i++) {
    const req = http.request(`${base}/api/slow?ms=30000`, { headers: { authorization: `Bearer ${token}` }, agent: false });
    req.on('error', () => {});
    req.end();
    reqs.push(req);
  }
  await waitFor('2 route slots held', async () => (await active(broker, resource)) === 2);
  await waitFor('2 tenant slots held', async () => (await active(broker, 'gateway:tenant:acme')) === 2);
  // The tenant is full: a third is refused by the tenant layer, and its route
  // slot is given back with the response.
  const third = await request(base, '/api/hello', { token });
  assert.equal(third.status, 429);
  assert.equal(await active(broker, resource), 2);
  for (const r of reqs) r.destroy();
  await waitFor('route slots back to 0', async () => (await active(broker, resource)) === 0);
  await waitFor('tenant slots back to 0', async () => (await active(broker, 'gateway:tenant:acme')) === 0);
  // Released once: the slots are usable again, and no count went negative.
  assert.equal((await request(base, '/api/slow?ms=1', { token })).status, 200);
  assert.equal(await active(broker, resource), 0);
  const s = (await broker.getStats()).find((x) => x.resource === resource);
  assert.equal(s.usage.maxConcurrentRequests, 0);
});
