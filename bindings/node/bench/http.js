'use strict';
// Requests per second through the Fastify example (examples/fastify, the
// pressure plugin on the binding) against Fastify + @fastify/rate-limit, the
// same handler, each server in its own process, load by autocannon from this
// one, interleaved rounds in one run. Limits are never reached: this
// measures the cost of the check on the request path.
//
// Run: (cd ../../../examples/fastify && npm ci) && node http.js
// Env: ROUNDS (default 3), SECONDS (default 5), CONNECTIONS (default 50).

const { spawn } = require('node:child_process');
const path = require('node:path');
const autocannon = require('autocannon');
const { machineReport } = require('./common');

const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SECONDS = Number(process.env.SECONDS ?? 5);
const CONNECTIONS = Number(process.env.CONNECTIONS ?? 50);
const BIG = 1_000_000_000_000;

async function serve(kind) {
  let app;
  if (kind === 'pressure') {
    const { ResourceBroker } = require('@pressure-rs/broker');
    const { buildApp } = require(path.join(__dirname, '..', '..', '..', 'examples', 'fastify', 'app.js'));
    app = buildApp(new ResourceBroker(), {
      routes: [{ prefix: '/api', resource: 'gateway:service:api', limits: { requestsPerMinute: BIG } }],
    });
  } else {
    app = require('fastify')({ logger: false });
    await app.register(require('@fastify/rate-limit'), { max: BIG, timeWindow: 60_000 });
    app.get('/api/hello', async () => ({ hello: 'anonymous' }));
  }
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  process.stdout.write(`${address}\n`);
}

function start(kind) {
  const child = spawn(process.execPath, [__filename, 'serve', kind], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve({ child, url: out.trim() });
    });
    child.on('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
  });
}

async function main() {
  machineReport('before');
  console.log(`node ${process.version}; ${ROUNDS} interleaved rounds of ${SECONDS} s, ${CONNECTIONS} connections; compare ratios`);
  const servers = {
    'Fastify example (pressure plugin)': await start('pressure'),
    'Fastify + @fastify/rate-limit': await start('peer'),
  };
  const rps = Object.fromEntries(Object.keys(servers).map((k) => [k, []]));
  const names = Object.keys(servers);
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of r % 2 ? [...names].reverse() : names) {
      const res = await autocannon({ url: `${servers[name].url}/api/hello`, connections: CONNECTIONS, duration: SECONDS });
      if (res.non2xx) throw new Error(`${name}: ${res.non2xx} non-2xx answers`);
      rps[name].push(res.requests.average);
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const base = med(rps[names[0]]);
  console.log('| server | req/s (median of rounds) | rounds | vs ' + names[0] + ' |');
  console.log('|---|---:|---|---:|');
  for (const n of names) {
    console.log(`| ${n} | ${Math.round(med(rps[n]))} | ${rps[n].map(Math.round).join(', ')} | ${(med(rps[n]) / base).toFixed(2)}x |`);
  }
  for (const s of Object.values(servers)) {
    s.child.removeAllListeners('exit');
    s.child.kill();
  }
}

if (process.argv[2] === 'serve') {
  serve(process.argv[3]).catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  main()
    .then(() => machineReport('after'))
    .catch((e) => {
      console.error(e);
      process.exit(1);
    });
}
