'use strict';
// tryAcquire + release per second on memory, beside rate-limiter-flexible
// (RateLimiterMemory) and @fastify/rate-limit's LocalStore, interleaved
// rounds in one run; then the edge overshoot of each (a fixed window admits
// ~2N across its edge, the broker's sliding window never more than N).
//
// Run: npm ci && node memory.js   (in bindings/node/bench, addon built)
// Env: ROUNDS (default 7), OPS (default 200000).

const { ResourceBroker } = require('@pressure-rs/broker');
const { RateLimiterMemory } = require('rate-limiter-flexible');
const LocalStore = require('@fastify/rate-limit/store/LocalStore');
const { interleaved, report, edgeOvershoot, machineReport } = require('./common');

const ROUNDS = Number(process.env.ROUNDS ?? 7);
const OPS = Number(process.env.OPS ?? 200_000);
const BIG = 1_000_000_000_000; // never exhausted: the cost of a decision

async function throughput() {
  const broker = new ResourceBroker();
  broker.registerLimit('rate', { requestsPerMinute: BIG });
  broker.registerLimit('slots', { requestsPerMinute: BIG, maxConcurrentRequests: 1000 });
  const rlf = new RateLimiterMemory({ points: BIG, duration: 60 });
  const store = new LocalStore(false, false, 5000);
  const incr = (key) =>
    new Promise((resolve, reject) => store.incr(key, (e, r) => (e ? reject(e) : resolve(r)), 60_000, BIG));
  const contenders = [
    {
      name: 'pressure tryAcquire+release (rate)',
      run: async (n) => {
        for (let i = 0; i < n; i++) {
          const a = await broker.tryAcquire('rate');
          if (!a.allowed) throw new Error('denied');
          await a.release();
        }
      },
    },
    {
      name: 'pressure tryAcquire+release (rate + concurrency lease)',
      run: async (n) => {
        for (let i = 0; i < n; i++) {
          const a = await broker.tryAcquire('slots');
          if (!a.allowed) throw new Error('denied');
          await a.release();
        }
      },
    },
    {
      name: 'rate-limiter-flexible RateLimiterMemory.consume',
      run: async (n) => {
        for (let i = 0; i < n; i++) await rlf.consume('k');
      },
    },
    {
      name: '@fastify/rate-limit LocalStore.incr',
      run: async (n) => {
        for (let i = 0; i < n; i++) await incr('k');
      },
    },
  ];
  report(
    `memory: one key, sequential awaits, ${ROUNDS} interleaved rounds of ${OPS} ops`,
    await interleaved(contenders, { rounds: ROUNDS, ops: OPS }),
  );
}

async function edge() {
  const N = 100;
  const W = 1000; // the broker's windows are a second and a minute
  const broker = new ResourceBroker();
  broker.registerLimit('edge', { requestsPerSecond: N });
  const rlf = new RateLimiterMemory({ points: N, duration: W / 1000 });
  const store = new LocalStore(false, false, 5000);
  await edgeOvershoot(
    'memory edge overshoot',
    [
      { name: 'pressure (sliding window)', tryOne: async () => (await broker.tryAcquire('edge')).allowed },
      { name: 'rate-limiter-flexible RateLimiterMemory', tryOne: () => rlf.consume('edge').then(() => true, () => false) },
      {
        name: '@fastify/rate-limit LocalStore',
        tryOne: () => new Promise((r) => store.incr('edge', (_, x) => r(x.current <= N), W, N)),
      },
    ],
    { N, W, gap: 300 },
  );
}

async function main() {
  machineReport('before');
  console.log(`node ${process.version}; compare ratios, not absolute numbers`);
  // The edge first: the throughput rounds leave millions of collected
  // results whose finalizers would stall the event loop past the edge.
  await edge();
  await throughput();
}

main()
  .then(() => machineReport('after'))
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
