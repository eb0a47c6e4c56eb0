'use strict';
// Shared helpers of the binding's tests: the Redis URLs from the environment
// (failing with a clear message when missing), bounded waits on a condition,
// and unique resource ids so tests on one Redis never share keys.

const { setTimeout: sleep } = require('node:timers/promises');
const crypto = require('node:crypto');

const HOW =
  'run these tests through `cargo test -p pressure-cli --test bindings_node` (it starts Redis and a Redis Cluster), ' +
  'or start them yourself and set the variable';

/** The single-node Redis URL; throws (the test fails) when it is not set. */
function redisUrl() {
  const url = process.env.PRESSURE_TEST_REDIS_URL;
  if (!url) throw new Error(`PRESSURE_TEST_REDIS_URL is not set: ${HOW} (e.g. redis://127.0.0.1:6379)`);
  return url;
}

/** Comma-separated Redis Cluster node URLs; throws when not set. */
function redisClusterUrl() {
  const url = process.env.PRESSURE_TEST_REDIS_CLUSTER_URL;
  if (!url) {
    throw new Error(
      `PRESSURE_TEST_REDIS_CLUSTER_URL is not set: ${HOW} (comma-separated node URLs, e.g. redis://127.0.0.1:7000,redis://127.0.0.1:7001)`,
    );
  }
  return url;
}

/** Polls `check` (sync or async) every few ms until it returns a truthy
 * value, at most `timeoutMs`; throws naming `what` otherwise. */
async function waitFor(what, check, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(5);
  }
}

/** A resource id no other test (or earlier run on the same Redis) uses. */
function unique(prefix) {
  return `${prefix}:${crypto.randomUUID()}`;
}

/** The stats of one resource. */
async function statsOf(broker, resource) {
  const s = (await broker.getStats()).find((r) => r.resource === resource);
  if (!s) throw new Error(`no stats for ${resource}`);
  return s;
}

module.exports = { redisUrl, redisClusterUrl, waitFor, unique, statsOf, sleep };
