'use strict';
// Inputs an attack suite tried (defects 10-12): non-finite and out-of-range
// numbers in limits, options and counts are ConfigErrors (never a limit
// dropped or a number wrapped), a task's rejection value comes back as is
// whatever it is, and a resource id that is not a string is a ConfigError on
// every entry point.

const test = require('node:test');
const assert = require('node:assert/strict');
const { ResourceBroker, LimitTemplate, ConfigError } = require('..');
const { statsOf } = require('./support');

/** A predicate for assert.throws/rejects: a ConfigError with its code,
 * whose `field` (when `field` is given) is that key. */
function configError(field) {
  return (e) => {
    assert.ok(e instanceof ConfigError, `expected a ConfigError, got ${e && e.name}: ${e && e.message}`);
    assert.equal(e.code, 'ERR_PRESSURE_CONFIG');
    if (field !== undefined) assert.equal(e.field, field, e.message);
    return true;
  };
}

const NON_FINITE = [NaN, Infinity, -Infinity];
// Not a count: negative, fractional, beyond 2^53 (not exact in a double),
// beyond u64, a BigInt, a string.
const NOT_A_COUNT = [...NON_FINITE, -1, 1.5, 2 ** 53, 2 ** 64, 10n, '5'];

test('a NaN or ±Infinity limit is a ConfigError, never a limit dropped (registerLimit)', async () => {
  for (const bad of NON_FINITE) {
    const b = new ResourceBroker();
    assert.throws(
      () => b.registerLimit('r', { requestsPerSecond: bad, maxConcurrentRequests: 100 }),
      configError('limits.requestsPerSecond'),
      String(bad),
    );
    // Nothing registered: the burst is not admitted on the concurrency limit alone.
    let admitted = 0;
    for (let i = 0; i < 50; i++) {
      try {
        if ((await b.tryAcquire('r')).allowed) admitted++;
      } catch {
        // UnknownResourceError: not registered.
      }
    }
    assert.equal(admitted, 0, `requestsPerSecond ${bad}`);
  }
});

test('a NaN, ±Infinity or BigInt anywhere in limits or queue settings is a ConfigError', () => {
  const b = new ResourceBroker();
  for (const bad of [...NON_FINITE, 5n]) {
    assert.throws(() => b.registerLimit('r', { tokensPerMinute: 1000, burst: bad }), configError('limits.burst'));
    assert.throws(
      () => b.registerLimit('r', { requestsPerSecond: 5, leasing: { maxShare: bad, ttlMs: 1000 } }),
      configError('limits.leasing.maxShare'),
    );
    assert.throws(
      () => b.register('q', { limits: { requestsPerSecond: 5, maxConcurrentRequests: bad } }),
      configError('limits.maxConcurrentRequests'),
    );
    assert.throws(
      () => b.register('q', { limits: { requestsPerSecond: 5 }, queue: { maxQueued: bad } }),
      configError('queue.maxQueued'),
    );
    assert.throws(
      () => b.register('q', { limits: { requestsPerSecond: 5 }, queue: { batchHeadroom: bad } }),
      configError('queue.batchHeadroom'),
    );
  }
  // A function would be left out by JSON.stringify (the limit unset).
  assert.throws(() => b.registerLimit('r', { requestsPerSecond: () => 5 }), configError('limits.requestsPerSecond'));
  // Negative, fractional and too large counts: ConfigErrors too.
  for (const bad of [-1, 1.5, 2 ** 64, 2 ** 53]) {
    assert.throws(() => b.registerLimit('r', { requestsPerSecond: bad }), configError('limits.requestsPerSecond'), String(bad));
  }
  // Nothing of the above was registered.
  assert.equal(b.unregister('r'), false);
  assert.equal(b.unregister('q'), false);
});

test('a NaN or ±Infinity limit in a LimitTemplate is a ConfigError', async () => {
  for (const bad of NON_FINITE) {
    assert.throws(
      () => new LimitTemplate({ requestsPerSecond: bad, maxConcurrentRequests: 100 }),
      configError('limits.requestsPerSecond'),
      String(bad),
    );
  }
  assert.throws(() => new LimitTemplate({ requestsPerMinute: 10n }), configError('limits.requestsPerMinute'));
  assert.throws(() => new LimitTemplate({ requestsPerMinute: 2.5 }), configError());
  // A valid template still counts (2 of 3 admitted).
  const b = new ResourceBroker();
  const tpl = new LimitTemplate({ requestsPerMinute: 2 });
  let admitted = 0;
  for (let i = 0; i < 3; i++) {
    await b.lazyLimit('t', tpl);
    if ((await b.tryAcquire('t')).allowed) admitted++;
  }
  assert.equal(admitted, 2);
});

test('a NaN or ±Infinity in the Redis options is a ConfigError', async () => {
  assert.throws(
    () => new ResourceBroker({ redis: { url: 'redis://127.0.0.1:1', timeoutMs: NaN } }),
    configError('redis.timeoutMs'),
  );
  await assert.rejects(
    ResourceBroker.connect({ redis: { url: 'redis://127.0.0.1:1', timeoutMs: Infinity } }),
    configError('redis.timeoutMs'),
  );
});

test('tryAcquire counts: NaN, ±Infinity, negative, fractional, beyond 2^53 are ConfigErrors, nothing reserved', async () => {
  const b = new ResourceBroker();
  b.registerLimit('l', { requestsPerSecond: 1000, tokensPerMinute: 1_000_000, costMicroUsdPerDay: 1_000_000 });
  for (const bad of NOT_A_COUNT) {
    for (const key of ['requests', 'inputTokens', 'outputTokens', 'costMicroUsd', 'tokens']) {
      await assert.rejects(b.tryAcquire('l', { [key]: bad }), configError(), `${key}: ${String(bad)}`);
    }
    await assert.rejects(b.tryAcquire('l', { tokens: { input: bad } }), configError(), String(bad));
    await assert.rejects(b.tryAcquire('l', { tokens: { output: bad } }), configError(), String(bad));
  }
  const s = await statsOf(b, 'l');
  assert.equal(s.allowed, 0);
  assert.equal(s.denied, 0);
});

test('reconcile counts: NaN, ±Infinity, negative, fractional, beyond 2^53 are ConfigErrors', async () => {
  const b = new ResourceBroker();
  b.registerLimit('tok', { tokensPerMinute: 1000, maxConcurrentRequests: 1 });
  const a = await b.tryAcquire('tok', { tokens: 100 });
  assert.equal(a.allowed, true);
  for (const bad of NOT_A_COUNT) {
    for (const key of ['requests', 'inputTokens', 'outputTokens', 'costMicroUsd']) {
      await assert.rejects(a.reconcile({ [key]: bad }), configError(), `${key}: ${String(bad)}`);
    }
  }
  // The reservation stands: 900 tokens left, not 1000 nor a wrapped count.
  assert.equal((await b.tryAcquire('tok', { tokens: 901 })).allowed, false);
  await a.release();
});

test('enqueue numbers: NaN, ±Infinity, negative, fractional are ConfigErrors and the task never runs', async () => {
  const b = new ResourceBroker();
  b.register('q', { limits: { tokensPerMinute: 1_000_000, costMicroUsdPerDay: 1_000_000 } });
  let runs = 0;
  const execute = () => {
    runs++;
  };
  for (const bad of NOT_A_COUNT) {
    await assert.rejects(b.enqueue({ resource: 'q', tokens: bad, execute }), configError(), String(bad));
    await assert.rejects(b.enqueue({ resource: 'q', tokens: { output: bad }, execute }), configError(), String(bad));
    await assert.rejects(b.enqueue({ resource: 'q', costMicroUsd: bad, execute }), configError(), String(bad));
    await assert.rejects(b.enqueue({ resource: 'q', maxWaitMs: bad, execute }), configError(), String(bad));
  }
  assert.equal(runs, 0);
  // reportUsage checks its counts too: the task fails with that ConfigError.
  await assert.rejects(
    b.enqueue({ resource: 'q', execute: ({ reportUsage }) => reportUsage({ inputTokens: NaN }) }),
    configError(),
  );
});

test('a task that rejects with any value (undefined, null, a number, a string, an Error) rejects enqueue with it as is', async () => {
  const b = new ResourceBroker();
  b.register('p', { limits: { requestsPerSecond: 1000 } });
  const values = [undefined, null, 0, 42, '', 'boom', false, { not: 'an error' }, new Error('boom')];
  for (const v of values) {
    for (const style of ['throw', 'reject', 'async throw']) {
      const execute =
        style === 'throw'
          ? () => {
              throw v;
            }
          : style === 'reject'
            ? () => Promise.reject(v)
            : async () => {
                throw v;
              };
      let caught = 'nothing';
      try {
        await b.enqueue({ resource: 'p', execute });
      } catch (e) {
        caught = e;
      }
      assert.ok(Object.is(caught, v), `${style} ${String(v)}: got ${caught && caught.name} ${caught && caught.message}`);
    }
  }
  // `Promise.reject()`: rejected with undefined.
  let caught = 'nothing';
  try {
    await b.enqueue({ resource: 'p', execute: () => Promise.reject() });
  } catch (e) {
    caught = e;
  }
  assert.equal(caught, undefined);
  // A later success after nothing failed still resolves.
  assert.equal((await b.enqueue({ resource: 'p', execute: () => 'ok' })).result, 'ok');
});

test('a resource id that is not a non-empty string is a ConfigError on every entry point', async () => {
  const b = new ResourceBroker();
  b.registerLimit('l', { requestsPerSecond: 10 });
  b.register('q', { limits: { requestsPerSecond: 10 } });
  const tpl = new LimitTemplate({ requestsPerSecond: 10 });
  const bad = [null, undefined, 42, {}, [], Symbol('s'), ''];
  for (const r of bad) {
    const what = typeof r === 'symbol' ? 'symbol' : JSON.stringify(r);
    assert.throws(() => b.register(r, { limits: { requestsPerSecond: 1 } }), configError('resource'), `register ${what}`);
    assert.throws(() => b.registerLimit(r, { requestsPerSecond: 1 }), configError('resource'), `registerLimit ${what}`);
    assert.throws(() => b.unregister(r), configError('resource'), `unregister ${what}`);
    await assert.rejects(b.tryAcquire(r), configError('resource'), `tryAcquire ${what}`);
    await assert.rejects(b.tryAcquire(r, { requests: 1 }), configError('resource'), `tryAcquire ${what}`);
    await assert.rejects(b.lazyLimit(r, tpl), configError('resource'), `lazyLimit ${what}`);
    await assert.rejects(b.enqueue({ resource: r, execute: () => 1 }), configError('resource'), `enqueue ${what}`);
  }
  // The registered resources are untouched.
  assert.equal((await b.tryAcquire('l')).allowed, true);
  assert.equal((await b.enqueue({ resource: 'q', execute: () => 7 })).result, 7);
});
