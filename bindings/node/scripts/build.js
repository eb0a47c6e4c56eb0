#!/usr/bin/env node
'use strict';
// Builds the native addon (`cargo build -p pressure-node [--release]`) and
// copies the library to pressure-node.node, the file index.js loads.
// Respects CARGO_TARGET_DIR. Every failure is one line naming what is missing.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

function fail(msg) {
  console.error(`@pressure-rs/broker build: ${msg}`);
  process.exit(1);
}

const major = Number(process.versions.node.split('.')[0]);
if (major < 20) fail(`needs Node.js 20 or later (this is ${process.version}): https://nodejs.org`);

const release = process.argv.includes('--release');
const pkgDir = path.resolve(__dirname, '..');
const workspace = path.resolve(pkgDir, '..', '..');
const cargo = process.env.CARGO || 'cargo';

const probe = spawnSync(cargo, ['--version'], { encoding: 'utf8' });
if (probe.error || probe.status !== 0) fail('needs a Rust toolchain (cargo on PATH): https://rustup.rs');

const args = ['build', '-p', 'pressure-node'];
if (release) args.push('--release');
const build = spawnSync(cargo, args, { cwd: workspace, stdio: 'inherit' });
if (build.error) fail(`cannot run cargo: ${build.error.message}`);
if (build.status !== 0) fail(`\`cargo ${args.join(' ')}\` failed (exit ${build.status}); see the output above`);

const targetDir = process.env.CARGO_TARGET_DIR
  ? path.resolve(workspace, process.env.CARGO_TARGET_DIR)
  : path.join(workspace, 'target');
const file = { darwin: 'libpressure_node.dylib', win32: 'pressure_node.dll' }[process.platform] ?? 'libpressure_node.so';
const built = path.join(targetDir, release ? 'release' : 'debug', file);
if (!fs.existsSync(built)) fail(`cargo succeeded but ${built} is missing`);
const dest = path.join(pkgDir, 'pressure-node.node');
// Copy through a temporary name so a running process never loads half a file.
const tmp = `${dest}.${process.pid}.tmp`;
fs.copyFileSync(built, tmp);
fs.renameSync(tmp, dest);
console.log(`@pressure-rs/broker: built ${path.relative(pkgDir, dest)} (${release ? 'release' : 'debug'})`);
