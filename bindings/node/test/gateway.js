'use strict';
// The Rust gateway (`$PRESSURE_BIN gateway --config FILE`) as a child of a
// test: a config file in a temporary directory, free loopback ports (another
// pair when one was taken meanwhile), ready when /healthz answers, killed by
// the test. Plus an HS256 JWT signer, so the test needs no npm package.

const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { waitFor } = require('./support');

/** The `pressure` binary; throws (the test fails) when PRESSURE_BIN is unset. */
function pressureBin() {
  const bin = process.env.PRESSURE_BIN;
  if (!bin) {
    throw new Error(
      'PRESSURE_BIN is not set: run through `cargo test -p pressure-cli --test bindings_node`, ' +
        'or build it (cargo build -p pressure-cli) and set PRESSURE_BIN=target/debug/pressure',
    );
  }
  return bin;
}

function b64url(x) {
  return Buffer.from(x).toString('base64url');
}

/** An HS256 JWT over `claims` (an `exp` one hour ahead is added). */
function jwt(secret, claims) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify({ exp: Math.floor(Date.now() / 1000) + 3600, ...claims }));
  const sig = crypto.createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

/** A loopback port that was free a moment ago. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** One GET; resolves to { status, headers, body }. */
function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${url} timed out`)));
  });
}

/** A trivial upstream: 200 "ok" on every path. */
async function startUpstream() {
  const server = http.createServer((req, res) => res.end('ok'));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

/**
 * Starts the gateway with `config(proxyPort, adminPort)` (the whole JSON
 * document) and `env`; resolves to { base, admin, stop } once /healthz answers.
 */
async function startGateway(config, env = {}) {
  const bin = pressureBin();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pressure-node-gw-'));
  for (let attempt = 1; ; attempt++) {
    const proxy = await freePort();
    const admin = await freePort();
    const file = path.join(dir, 'gateway.json');
    fs.writeFileSync(file, JSON.stringify(config(proxy, admin)));
    const child = spawn(bin, ['gateway', '--config', file], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    let exited = null;
    child.on('exit', (code) => (exited = code ?? -1));
    const stop = () => {
      if (exited === null) child.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    };
    try {
      await waitFor(
        'the gateway to answer /healthz',
        async () => {
          if (exited !== null) throw new Error(`gateway exited (${exited}):\n${log}`);
          try {
            return (await get(`http://127.0.0.1:${admin}/healthz`)).status === 200;
          } catch {
            return false;
          }
        },
        20_000,
      );
      return { base: `http://127.0.0.1:${proxy}`, admin: `http://127.0.0.1:${admin}`, stop, log: () => log };
    } catch (e) {
      if (exited === null) child.kill('SIGKILL');
      if (attempt < 5 && /address already in use/i.test(log)) continue;
      fs.rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }
}

module.exports = { pressureBin, jwt, freePort, get, startUpstream, startGateway };
