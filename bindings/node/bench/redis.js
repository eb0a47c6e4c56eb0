'use strict';
// tryAcquire + release per second over Redis, beside rate-limiter-flexible's
// RateLimiterRedis (ioredis) on the same Redis, interleaved rounds in one
// run, one at a time and with many in flight; then the edge overshoot of both.
//
// Run: REDIS_URL=redis://127.0.0.1:6379 node redis.js   (in bindings/node/bench)
// Env: ROUNDS (default 5), OPS (default 20000), CONCURRENCY (default 64).

const crypto = require('node:crypto');
const Redis = require('ioredis');
const { ResourceBroker } = require('@pressure-rs/broker');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { interleaved, report, edgeOvershoot, pool, machineReport } = require('./common');

const URL_ = process.env.REDIS_URL ?? process.env.PRESSURE_TEST_REDIS_URL;
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const OPS = Number(process.env.OPS ?? 20_000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 64);
const BIG = 1_000_000_000_000;

async function main() {
  machineReport('before');
  if (!URL_) throw new Error('REDIS_URL is not set (e.g. redis://127.0.0.1:6379)');
  console.log(`node ${process.version}; Redis ${URL_}; compare ratios`);
  const run = crypto.randomUUID();
  const broker = await ResourceBroker.connect({ redis: { url: URL_, keyPrefix: `bench-${run}`, timeoutMs: 1000 } });
  broker.registerLimit('rate', { requestsPerMinute: BIG });
  const redis = new Redis(URL_);
  const rlf = new RateLimiterRedis({ storeClient: redis, points: BIG, duration: 60, keyPrefix: `rlf-${run}` });
  const ours = async () => {
    const a = await broker.tryAcquire('rate');
    if (!a.allowed) throw new Error(`denied: ${JSON.stringify(a)}`);
    await a.release();
  };
  const theirs = () => rlf.consume('k');
  for (const c of [1, CONCURRENCY]) {
    const results = await interleaved(
      [
        { name: `pressure tryAcquire+release (${c} in flight)`, run: (n) => pool(n, c, ours) },
        { name: `rate-limiter-flexible RateLimiterRedis.consume (${c} in flight)`, run: (n) => pool(n, c, theirs) },
      ],
      { rounds: ROUNDS, ops: c === 1 ? Math.min(OPS, 5000) : OPS },
    );
    report(`redis: one key, ${c} in flight, ${ROUNDS} interleaved rounds`, results);
  }
  const N = 100;
  broker.registerLimit('edge', { requestsPerSecond: N });
  const rlfEdge = new RateLimiterRedis({ storeClient: redis, points: N, duration: 1, keyPrefix: `rlf-edge-${run}` });
  await edgeOvershoot(
    'redis edge overshoot',
    [
      { name: 'pressure (sliding window, Redis)', tryOne: async () => (await broker.tryAcquire('edge')).allowed },
      { name: 'rate-limiter-flexible RateLimiterRedis', tryOne: () => rlfEdge.consume('edge').then(() => true, () => false) },
    ],
    { N, W: 1000, gap: 300 },
  );
  redis.disconnect();
  process.exit(0);
}

main()
  .then(() => machineReport('after'))
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
