'use strict';
// One tenant quota across languages: the Rust gateway (per-tenant limits,
// HS256 JWT, tenant claim namespaceId, on Redis) and this binding charge the
// same `gateway:tenant:<id>` resource with the same limits, and together
// never admit more than N per window.

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { ResourceBroker } = require('..');
const { redisUrl } = require('./support');
const { jwt, get, startUpstream, startGateway } = require('./gateway');

test('the gateway and the Node binding share one tenant quota on Redis', async (t) => {
  const url = redisUrl();
  const keyPrefix = `node-tenant-${crypto.randomUUID()}`;
  const secret = crypto.randomBytes(24).toString('hex');
  const tenant = 'acme';
  const limits = { requestsPerMinute: 20 };
  const upstream = await startUpstream();
  t.after(() => upstream.close());
  const gw = await startGateway(
    (proxy, admin) => ({
      gateway: {
        listen: `127.0.0.1:${proxy}`,
        admin: { listen: `127.0.0.1:${admin}` },
        upstreams: { demo: { url: upstream.url, pathPrefix: '/' } },
        backend: { type: 'redis', url, keyPrefix },
        auth: { required: true, jwt: { algorithms: ['HS256'], secretEnv: 'NODE_TEST_JWT_SECRET', tenantClaim: 'namespaceId' } },
        pressure: { enabled: true, perTenant: { enabled: true, limits } },
      },
    }),
    { NODE_TEST_JWT_SECRET: secret },
  );
  t.after(() => gw.stop());

  const broker = await ResourceBroker.connect({ redis: { url, keyPrefix } });
  // The gateway registers `gateway:tenant:<id>` lazily with perTenant.limits:
  // the same limits give the same script shape and the same keys.
  broker.registerLimit(`gateway:tenant:${tenant}`, limits);
  const token = jwt(secret, { namespaceId: tenant, sub: 'user-1' });

  let viaGateway = 0;
  let viaNode = 0;
  let refusedGateway = 0;
  let refusedNode = 0;
  for (let i = 0; i < 16; i++) {
    const res = await get(`${gw.base}/hello`, { authorization: `Bearer ${token}` });
    if (res.status === 200) viaGateway++;
    else {
      assert.equal(res.status, 429, `${res.status} ${res.body}\n${gw.log()}`);
      assert.ok(Number(res.headers['retry-after']) >= 1);
      refusedGateway++;
    }
    const a = await broker.tryAcquire(`gateway:tenant:${tenant}`);
    if (a.allowed) viaNode++;
    else refusedNode++;
  }
  // 32 attempts in well under a minute on a quota of 20: exactly 20 pass,
  // split between the two stacks, and both saw refusals at the end.
  assert.equal(viaGateway + viaNode, 20, JSON.stringify({ viaGateway, viaNode }));
  assert.ok(viaGateway >= 9 && viaNode >= 9, JSON.stringify({ viaGateway, viaNode }));
  assert.ok(refusedGateway > 0 && refusedNode > 0);
  const stats = (await broker.getStats()).find((s) => s.resource === `gateway:tenant:${tenant}`);
  assert.equal(stats.usage.requestsPerMinute, 20, 'the store counts both stacks');
  // Another tenant has its own quota.
  const other = jwt(secret, { namespaceId: 'globex' });
  assert.equal((await get(`${gw.base}/hello`, { authorization: `Bearer ${other}` })).status, 200);
});
