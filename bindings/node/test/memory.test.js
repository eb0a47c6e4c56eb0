'use strict';
// The binding over the in-memory backend: check+reject counts and wait
// times, release semantics, concurrency slots, queue priority and retries,
// typed errors, stats.

const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('node:v8');
const vm = require('node:vm');
const {
  ResourceBroker,
  ConfigError,
  UnknownResourceError,
  QueueFullError,
  QueueTimeoutError,
  RateLimitedError,
  DemandTooLargeError,
} = require('..');
const { waitFor, statsOf } = require('./support');

test('tryAcquire admits N per second, then denies with a wait time', async () => {
  const b = new ResourceBroker();
  b.registerLimit('webhooks', { requestsPerSecond: 5 });
  let allowed = 0;
  const denials = [];
  for (let i = 0; i < 8; i++) {
    const r = await b.tryAcquire('webhooks');
    if (r.allowed) {
      allowed++;
      assert.equal(r.waitTimeMs, 0);
    } else denials.push(r);
  }
  assert.equal(allowed, 5);
  assert.equal(denials.length, 3);
  for (const d of denials) {
    // At most S+1 = 31 sub-windows of ⌈W/30⌉ = 34 ms (the core's window).
    assert.ok(d.waitTimeMs > 0 && d.waitTimeMs <= 31 * 34, `wait ${d.waitTimeMs}`);
    assert.equal(d.dimension, 'requestsPerSecond');
  }
  const s = await statsOf(b, 'webhooks');
  assert.equal(s.allowed, 5);
  assert.equal(s.denied, 3);
  assert.equal(s.kind, 'limit');
  // Limit resources have no queue: null, never 0.
  assert.equal(s.queued, null);
  assert.equal(s.waitTimeMs, null);
});

test('tokens count on token dimensions, as a number or {input, output}', async () => {
  const b = new ResourceBroker();
  b.registerLimit('llm', { tokensPerMinute: 1000 });
  assert.equal((await b.tryAcquire('llm', { tokens: 600 })).allowed, true);
  assert.equal((await b.tryAcquire('llm', { tokens: { input: 300, output: 200 } })).allowed, false);
  assert.equal((await b.tryAcquire('llm', { inputTokens: 300, outputTokens: 100 })).allowed, true);
  await assert.rejects(b.tryAcquire('llm', { tokens: 5000 }), DemandTooLargeError);
});

test('release is idempotent and a no-op after a denial', async () => {
  const b = new ResourceBroker();
  b.registerLimit('slots', { maxConcurrentRequests: 1 });
  const first = await b.tryAcquire('slots');
  assert.equal(first.allowed, true);
  const denied = await b.tryAcquire('slots');
  assert.equal(denied.allowed, false);
  assert.equal(denied.dimension, 'maxConcurrentRequests');
  await denied.release();
  await denied.release();
  assert.equal((await statsOf(b, 'slots')).active, 1, 'a denied release frees nothing');
  await first.release();
  await first.release();
  assert.equal((await statsOf(b, 'slots')).active, 0);
  const again = await b.tryAcquire('slots');
  assert.equal(again.allowed, true);
  const { release } = again; // destructured, as in the original design
  await release();
  assert.equal((await statsOf(b, 'slots')).active, 0);
});

test('concurrency slots come back by release and by Symbol.asyncDispose', async () => {
  const b = new ResourceBroker();
  b.registerLimit('c', { maxConcurrentRequests: 2 });
  const a = await b.tryAcquire('c');
  const c = await b.tryAcquire('c');
  assert.equal(a.allowed && c.allowed, true);
  assert.equal((await b.tryAcquire('c')).allowed, false);
  await a.release();
  assert.equal((await statsOf(b, 'c')).active, 1);
  await c[Symbol.asyncDispose]();
  assert.equal(c.held, false);
  assert.equal((await statsOf(b, 'c')).active, 0);
  const both = [await b.tryAcquire('c'), await b.tryAcquire('c')];
  assert.deepEqual(
    both.map((x) => x.allowed),
    [true, true],
  );
  for (const x of both) await x[Symbol.asyncDispose]();
  assert.equal((await statsOf(b, 'c')).usage.maxConcurrentRequests, 0);
});

test('a result collected by the GC without release gives its slot back', async () => {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const b = new ResourceBroker();
  b.registerLimit('gc', { maxConcurrentRequests: 1 });
  await (async () => {
    const r = await b.tryAcquire('gc');
    assert.equal(r.allowed, true);
  })();
  assert.equal((await statsOf(b, 'gc')).active, 1);
  await waitFor('the dropped permit to be released', async () => {
    gc();
    await new Promise((r) => setImmediate(r));
    return (await statsOf(b, 'gc')).active === 0;
  });
  assert.equal((await b.tryAcquire('gc')).allowed, true);
});

test('reconcile corrects the token reservation', async () => {
  const b = new ResourceBroker();
  b.registerLimit('tok', { tokensPerMinute: 1000 });
  const r = await b.tryAcquire('tok', { tokens: { input: 100, output: 800 } });
  assert.equal(r.allowed, true);
  assert.equal((await b.tryAcquire('tok', { tokens: 500 })).allowed, false);
  await r.reconcile({ inputTokens: 100, outputTokens: 50 });
  assert.equal((await statsOf(b, 'tok')).usage.tokensPerMinute, 150);
  assert.equal((await b.tryAcquire('tok', { tokens: 500 })).allowed, true);
});

test('costMicroUsd spends a daily money budget; reconcile corrects it or keeps it', async () => {
  const b = new ResourceBroker();
  b.registerLimit('spend', { costMicroUsdPerDay: 1000 });
  const first = await b.tryAcquire('spend', { costMicroUsd: 600 });
  assert.equal(first.allowed, true);
  const refused = await b.tryAcquire('spend', { costMicroUsd: 600 });
  assert.equal(refused.allowed, false);
  assert.equal(refused.dimension, 'costMicroUsdPerDay');
  assert.ok(refused.waitTimeMs > 0 && refused.waitTimeMs <= 86_400_000, `${refused.waitTimeMs}`);
  assert.equal((await statsOf(b, 'spend')).usage.costMicroUsdPerDay, 600);
  // Tokens only: the reserved money stands.
  await first.reconcile({ inputTokens: 3 });
  assert.equal((await statsOf(b, 'spend')).usage.costMicroUsdPerDay, 600);
  await first.reconcile({ costMicroUsd: 150 });
  assert.equal((await statsOf(b, 'spend')).usage.costMicroUsdPerDay, 150);
  assert.equal((await b.tryAcquire('spend', { costMicroUsd: 600 })).allowed, true);
  assert.equal((await statsOf(b, 'spend')).usage.costMicroUsdPerDay, 750);
  await assert.rejects(b.tryAcquire('spend', { costMicroUsd: -1 }), ConfigError);
});

test('enqueue reserves costMicroUsd and reportUsage corrects it', async () => {
  const b = new ResourceBroker();
  b.register('qspend', { limits: { costMicroUsdPerDay: 1000 } });
  const out = await b.enqueue({
    resource: 'qspend',
    costMicroUsd: 400,
    execute: async ({ reportUsage }) => {
      assert.equal((await statsOf(b, 'qspend')).usage.costMicroUsdPerDay, 400);
      reportUsage({ costMicroUsd: 90 });
      return 'done';
    },
  });
  assert.equal(out.result, 'done');
  assert.equal((await statsOf(b, 'qspend')).usage.costMicroUsdPerDay, 90);
  // Usage without money keeps the reservation.
  await b.enqueue({ resource: 'qspend', costMicroUsd: 300, execute: ({ reportUsage }) => reportUsage({}) });
  assert.equal((await statsOf(b, 'qspend')).usage.costMicroUsdPerDay, 390);
});

test('enqueue runs interactive requests before batch ones on a saturated resource', async () => {
  const b = new ResourceBroker();
  b.register('llm', { limits: { maxConcurrentRequests: 1 }, queue: { interactiveBurst: 100 } });
  const blocker = await b.tryAcquire('llm');
  assert.equal(blocker.allowed, true);
  const order = [];
  const job = (name, priority) =>
    b.enqueue({
      resource: 'llm',
      priority,
      execute: async () => {
        order.push(name);
        return name;
      },
    });
  // One at a time: each call reaches the core's queue from its own task, so
  // calls made together may arrive in any order; the order of arrival is
  // what FIFO within a class is about.
  const jobs = [];
  for (const [name, priority] of [
    ['b1', 'batch'],
    ['b2', 'batch'],
    ['i1', 'interactive'],
    ['i2', 'interactive'],
  ]) {
    jobs.push(job(name, priority));
    const n = jobs.length;
    await waitFor(`${n} queued requests`, async () => (await statsOf(b, 'llm')).queued === n);
  }
  await blocker.release();
  const results = await Promise.all(jobs);
  assert.deepEqual(order, ['i1', 'i2', 'b1', 'b2']);
  assert.deepEqual(
    results.map((r) => r.result),
    ['b1', 'b2', 'i1', 'i2'],
  );
  for (const r of results) {
    assert.equal(r.attempts, 1);
    assert.ok(r.waitTimeMs >= 0);
  }
  const s = await statsOf(b, 'llm');
  assert.equal(s.kind, 'queue');
  assert.equal(s.queued, 0);
  assert.equal(s.active, 0);
});

test('a RateLimitedError is retried transparently by the core', async () => {
  const b = new ResourceBroker();
  b.register('provider', { limits: { requestsPerSecond: 100 }, queue: { maxRateLimitRetries: 3 } });
  const seen = [];
  const out = await b.enqueue({
    resource: 'provider',
    tokens: 10,
    execute: async ({ attempt }) => {
      seen.push(attempt);
      if (attempt < 3) throw new RateLimitedError(5, 'provider said 429');
      return 'done';
    },
  });
  assert.deepEqual(seen, [1, 2, 3]);
  assert.equal(out.result, 'done');
  assert.equal(out.attempts, 3);
  assert.ok(out.waitTimeMs >= 0);
});

test('retries run out: RateLimitedError with attempts; other errors pass through as is', async () => {
  const b = new ResourceBroker();
  b.register('p', { limits: { requestsPerSecond: 100 }, queue: { maxRateLimitRetries: 1 } });
  let calls = 0;
  await assert.rejects(
    b.enqueue({
      resource: 'p',
      execute: () => {
        calls++;
        throw new RateLimitedError(1);
      },
    }),
    (e) => e instanceof RateLimitedError && e.attempts === 2 && e.cause instanceof RateLimitedError,
  );
  assert.equal(calls, 2);
  class Boom extends Error {}
  await assert.rejects(
    b.enqueue({
      resource: 'p',
      execute: async () => {
        throw new Boom('boom');
      },
    }),
    Boom,
  );
});

test('queue bounds: QueueFullError and QueueTimeoutError', async () => {
  const b = new ResourceBroker();
  b.register('q', { limits: { maxConcurrentRequests: 1 }, queue: { maxQueued: 1, maxWaitMs: 100 } });
  const blocker = await b.tryAcquire('q');
  const waiting = b.enqueue({ resource: 'q', execute: () => 1 });
  await waitFor('one queued request', async () => (await statsOf(b, 'q')).queued === 1);
  await assert.rejects(
    b.enqueue({ resource: 'q', execute: () => 2 }),
    (e) => e instanceof QueueFullError && e.code === 'ERR_PRESSURE_QUEUE_FULL' && e.maxQueued === 1,
  );
  await assert.rejects(waiting, (e) => e instanceof QueueTimeoutError && e.code === 'ERR_PRESSURE_QUEUE_TIMEOUT');
  await blocker.release();
});

test('bad limits and options are ConfigErrors naming the key', () => {
  const b = new ResourceBroker();
  assert.throws(
    () => b.registerLimit('x', { requestsPerSecnd: 3 }),
    (e) => e instanceof ConfigError && e.code === 'ERR_PRESSURE_CONFIG' && /requestsPerSecnd/.test(e.message),
  );
  assert.throws(
    () => b.registerLimit('x', { requestsPerSecond: 0 }),
    (e) => e instanceof ConfigError && /requestsPerSecond/.test(e.message) && e.field === 'limits.requestsPerSecond',
  );
  assert.throws(
    () => b.register('y', { limits: { requestsPerSecond: 1 }, queue: { maxQueud: 3 } }),
    (e) => e instanceof ConfigError && /queue\.maxQueud/.test(e.message),
  );
  assert.throws(
    () => b.register('y', { limits: { requestsPerSecond: 1 }, queue: { maxWaitMs: 0 } }),
    (e) => e instanceof ConfigError && /maxWaitMs/.test(e.message),
  );
  assert.throws(() => b.register('y', { limit: {} }), (e) => e instanceof ConfigError && /limit/.test(e.message));
  b.registerLimit('dup', { requestsPerSecond: 1 });
  assert.throws(() => b.registerLimit('dup', { requestsPerSecond: 1 }), ConfigError);
  assert.throws(() => new ResourceBroker({ redsi: 'redis://x' }), (e) => e instanceof ConfigError && /redsi/.test(e.message));
});

test('bad acquisitions are typed errors', async () => {
  const b = new ResourceBroker();
  await assert.rejects(b.tryAcquire('nope'), (e) => e instanceof UnknownResourceError && e.resource === 'nope');
  b.registerLimit('l', { requestsPerSecond: 1 });
  await assert.rejects(b.tryAcquire('l', { requests: -1 }), ConfigError);
  await assert.rejects(b.tryAcquire('l', { priority: 'urgent' }), (e) => e instanceof ConfigError && /priority/.test(e.message));
  await assert.rejects(b.tryAcquire('l', { tokns: 1 }), (e) => e instanceof ConfigError && /tokns/.test(e.message));
  await assert.rejects(b.enqueue({ resource: 'l', execute: () => 1 }), (e) => e instanceof ConfigError && /register/.test(e.message));
});

test('lazyLimit registers a per-tenant resource once, with the template limits', async () => {
  const { LimitTemplate } = require('..');
  const b = new ResourceBroker();
  const tpl = new LimitTemplate({ requestsPerMinute: 2 });
  for (const tenant of ['a', 'b']) {
    let allowed = 0;
    for (let i = 0; i < 3; i++) {
      await b.lazyLimit(`tenant:${tenant}`, tpl);
      if ((await b.tryAcquire(`tenant:${tenant}`)).allowed) allowed++;
    }
    assert.equal(allowed, 2, `tenant ${tenant}`);
  }
  const s = await statsOf(b, 'tenant:a');
  assert.equal(s.lazy, true);
  assert.throws(() => new LimitTemplate({ requestsPerMinut: 2 }), (e) => e instanceof ConfigError && /requestsPerMinut/.test(e.message));
});
