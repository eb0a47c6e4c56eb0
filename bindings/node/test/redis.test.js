'use strict';
// The binding over Redis and Redis Cluster (URLs from
// PRESSURE_TEST_REDIS_URL and PRESSURE_TEST_REDIS_CLUSTER_URL; a test fails
// when its variable is missing): the same checks as in memory, and two Node
// processes on one Redis that together never exceed the limit.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { ResourceBroker, BackendError, ConfigError } = require('..');
const { redisUrl, redisClusterUrl, unique, statsOf, waitFor } = require('./support');

for (const [name, url] of [
  ['redis', redisUrl],
  ['cluster', redisClusterUrl],
]) {
  test(`${name}: counts, wait time, release and stats`, async () => {
    const b = await ResourceBroker.connect({ redis: url() });
    assert.equal(b.memory, false);
    const rate = unique('node:rate');
    b.registerLimit(rate, { requestsPerMinute: 4 });
    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await b.tryAcquire(rate));
    assert.deepEqual(
      answers.map((a) => a.allowed),
      [true, true, true, true, false, false],
    );
    for (const d of answers.slice(4)) {
      assert.ok(d.waitTimeMs > 0, `wait ${d.waitTimeMs}`);
      assert.equal(d.unavailable, false);
      await d.release(); // a no-op after a denial
    }
    const slots = unique('node:slots');
    b.registerLimit(slots, { maxConcurrentRequests: 2 });
    const held = [await b.tryAcquire(slots), await b.tryAcquire(slots)];
    assert.equal((await b.tryAcquire(slots)).allowed, false);
    await held[0].release();
    await held[0].release();
    assert.equal((await statsOf(b, slots)).usage.maxConcurrentRequests, 1);
    await held[1][Symbol.asyncDispose]();
    const s = await statsOf(b, slots);
    assert.equal(s.usage.maxConcurrentRequests, 0);
    assert.equal(s.active, 0);
    assert.equal(s.queued, null);
    assert.equal((await statsOf(b, rate)).usage.requestsPerMinute, 4);
  });

  test(`${name}: enqueue with a transparent retry`, async () => {
    const b = new ResourceBroker({ redis: url() }); // the lazy constructor
    const r = unique('node:queue');
    b.register(r, { limits: { requestsPerSecond: 50, maxConcurrentRequests: 1 } });
    const out = await b.enqueue({
      resource: r,
      tokens: 3,
      execute: async ({ attempt }) => {
        if (attempt === 1) throw new (require('..').RateLimitedError)(10);
        return attempt;
      },
    });
    assert.equal(out.result, 2);
    assert.equal(out.attempts, 2);
    assert.equal((await statsOf(b, r)).active, 0);
  });
}

test('connect names the address when Redis does not answer', async () => {
  await assert.rejects(
    ResourceBroker.connect({ redis: { url: 'redis://127.0.0.1:1', connectTimeoutMs: 200 } }),
    (e) => e instanceof BackendError && /127\.0\.0\.1:1/.test(e.message),
  );
  await assert.rejects(
    ResourceBroker.connect({ redis: { url: 'redis://127.0.0.1:1', timeoutMz: 3 } }),
    (e) => e instanceof ConfigError && /timeoutMz/.test(e.message),
  );
});

/** Starts the hammer fixture; resolves once it printed "ready". */
function hammer(url, resource, limits, durationMs) {
  const child = spawn(
    process.execPath,
    [path.join(__dirname, 'fixtures', 'hammer.js'), url, resource, JSON.stringify(limits), String(durationMs)],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const done = new Promise((resolve, reject) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', (code) => {
      clearTimeout(kill);
      if (code !== 0) return reject(new Error(`hammer exited with ${code}: ${out}`));
      resolve(JSON.parse(out.trim().split('\n').pop()));
    });
  });
  const ready = waitFor('the hammer to be ready', () => out.startsWith('ready'), 20_000);
  return { child, done, ready };
}

test('two Node processes on one Redis together admit exactly N per window', async () => {
  const url = redisUrl();
  const resource = unique('node:fleet');
  const limits = { requestsPerMinute: 150 };
  const procs = [hammer(url, resource, limits, 1500), hammer(url, resource, limits, 1500)];
  await Promise.all(procs.map((p) => p.ready));
  for (const p of procs) p.child.stdin.write('go\n');
  const counts = await Promise.all(procs.map((p) => p.done));
  const granted = counts.reduce((a, c) => a + c.granted, 0);
  // Both ran within one minute: the window admits N in total, never more,
  // and (both hammering past it) not less.
  assert.equal(granted, 150, JSON.stringify(counts));
  assert.ok(counts.every((c) => c.denied > 0), JSON.stringify(counts));
});
