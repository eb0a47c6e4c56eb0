'use strict';
// Shared by the benches: interleaved rounds (each contender runs once per
// round, in a rotating order, so machine drift hits all alike), medians, and
// a table with ratios against @pressure-rs/broker measured in the same run.

/** Runs `rounds` rounds of every contender's `run(ops)` (async; returns
 * nothing) and returns { name: [ns per op per round] }. */
async function interleaved(contenders, { rounds, ops, warmup = 1 }) {
  const out = Object.fromEntries(contenders.map((c) => [c.name, []]));
  for (let r = -warmup; r < rounds; r++) {
    const order = contenders.map((_, i) => contenders[(i + Math.max(r, 0)) % contenders.length]);
    for (const c of order) {
      const t0 = process.hrtime.bigint();
      await c.run(ops);
      const ns = Number(process.hrtime.bigint() - t0) / ops;
      if (r >= 0) out[c.name].push(ns);
    }
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Prints ns/op, ops/s and the ratio to `peer` (the first contender). */
function report(title, results) {
  const names = Object.keys(results);
  const base = median(results[names[0]]);
  console.log(`\n${title}`);
  console.log('| contender | ns/op (median) | ops/s | ns/op vs ' + names[0] + ' |');
  console.log('|---|---:|---:|---:|');
  for (const n of names) {
    const m = median(results[n]);
    console.log(`| ${n} | ${m.toFixed(0)} | ${Math.round(1e9 / m).toLocaleString('en-US')} | ${(m / base).toFixed(2)}x |`);
  }
}

const sleepUntil = (t) => new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));

/**
 * One line naming the machine a bench ran on and how quiet it was (as the
 * shell benches print it, benches/lib/common.sh): CPU model, cores, L2/L3
 * sizes (from lscpu where there is one) and the load average. Printed
 * `before` and `after` a run, so a ratio is read beside its machine.
 */
function machineReport(when) {
  const os = require('os');
  let l2 = '?';
  let l3 = '?';
  try {
    const out = require('child_process').execFileSync('lscpu', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    l2 = (out.match(/^L2 cache:\s*(.+)$/m) || [])[1] || '?';
    l3 = (out.match(/^L3 cache:\s*(.+)$/m) || [])[1] || '?';
  } catch (_) {
    // No lscpu: the sizes stay unknown.
  }
  const cpus = os.cpus();
  const model = cpus.length ? cpus[0].model.trim() : 'unknown CPU';
  const load = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  console.log(`machine (${when}): ${model}, ${cpus.length} cores, L2 ${l2}, L3 ${l3}; load average ${load}`);
}

module.exports = { interleaved, median, report, sleepUntil, machineReport };

/**
 * The edge overshoot of each contender (`{ name, tryOne() → Promise<bool> }`,
 * each limiting N per W ms): one request at t0 opens each fixed window,
 * then a burst of N at t0 + W − gap and another at t0 + W + gap, requests
 * of the contenders interleaved. A fixed window admits ~2N in that 2·gap;
 * a sliding window never more than N.
 */
async function edgeOvershoot(title, contenders, { N, W, gap }) {
  const burst = async () => {
    const c = contenders.map(() => 0);
    for (let i = 0; i < N; i++) {
      for (let k = 0; k < contenders.length; k++) if (await contenders[k].tryOne()) c[k]++;
    }
    return c;
  };
  const t0 = Date.now();
  for (const c of contenders) await c.tryOne();
  await sleepUntil(t0 + W - gap);
  const before = await burst();
  if (Date.now() > t0 + W) throw new Error(`the first burst ended past the window edge: machine too busy`);
  await sleepUntil(t0 + W + gap);
  const after = await burst();
  console.log(`\n${title}: limit ${N} per ${W} ms; one request at t0, a burst of ${N} at t0+${W - gap} ms and another at t0+${W + gap} ms`);
  console.log(`| contender | admitted before edge | after edge | total within ${2 * gap} ms | over N |`);
  console.log('|---|---:|---:|---:|---:|');
  contenders.forEach((c, k) => {
    const total = before[k] + after[k];
    console.log(`| ${c.name} | ${before[k]} | ${after[k]} | ${total} | ${Math.max(0, total - N)} |`);
  });
}

/** Runs `n` calls of `one()` with `concurrency` in flight. */
async function pool(n, concurrency, one) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
}

module.exports.edgeOvershoot = edgeOvershoot;
module.exports.pool = pool;
