'use strict';
// @pressure-rs/broker: the pressure ResourceBroker (Rust, pressure-core and
// pressure-redis) embedded in Node.js. This file is the whole JavaScript
// surface: it turns options into the native addon's arguments, results into
// plain objects and the addon's coded errors into typed Error subclasses.
// Limits, queues, priorities and retries are the Rust core's, not re-done here.

const path = require('node:path');

const ADDON = path.join(__dirname, 'pressure-node.node');

function loadNative() {
  try {
    return require(ADDON);
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND') {
      throw new Error(
        `@pressure-rs/broker: the native addon ${path.basename(ADDON)} is not built; ` +
          'run `npm run build` in bindings/node (needs a Rust toolchain, cargo on PATH: https://rustup.rs)',
      );
    }
    throw e;
  }
}

const native = loadNative();

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

// ---------------------------------------------------------------- errors

/** Base class of every error this package throws; `code` names the kind. */
class PressureError extends Error {
  constructor(message, code, fields) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    if (fields) Object.assign(this, fields);
  }
}

/**
 * Thrown by an `execute` task to report a downstream rate limit (a provider's
 * 429): the broker pauses the resource for `retryAfterMs` (or a backoff) and
 * runs the task again. Thrown by `enqueue` when retries ran out, with
 * `attempts` and the task's last error as `cause`.
 */
class RateLimitedError extends PressureError {
  constructor(retryAfterMs, message, fields) {
    super(message ?? 'rate limited', 'ERR_PRESSURE_RATE_LIMITED', fields);
    this.retryAfterMs = retryAfterMs ?? null;
  }
}

/** The class of each code the addon throws, but RateLimitedError (its
 * constructor takes the wait first). */
const BY_CODE = new Map();

/** A subclass of PressureError named `name` for the addon's error `code`
 * (`new X(message, fields)`), registered in BY_CODE. */
function codedError(name, code) {
  // A computed key names the class (`X.name`, and so `error.name`).
  const { [name]: cls } = {
    [name]: class extends PressureError {
      constructor(message, fields) {
        super(message, code, fields);
      }
    },
  };
  BY_CODE.set(code, cls);
  return cls;
}

// The kinds the addon throws (documented in index.d.ts):
// ConfigError — invalid options, limits or queue settings (the message names
//   the key), a duplicate resource id, or `enqueue` on a limit-only resource;
// UnknownResourceError — no resource is registered under that id;
// DemandTooLargeError — the demand exceeds what the limit can ever admit at
//   once: waiting would never help;
// QueueFullError — `enqueue`: the queue already holds `maxQueued` requests;
// QueueTimeoutError — `enqueue`: no capacity within the request's max wait;
// BackendError — the state backend (Redis) failed or cannot be reached.
const ConfigError = codedError('ConfigError', 'ERR_PRESSURE_CONFIG');
const UnknownResourceError = codedError('UnknownResourceError', 'ERR_PRESSURE_UNKNOWN_RESOURCE');
const DemandTooLargeError = codedError('DemandTooLargeError', 'ERR_PRESSURE_DEMAND_TOO_LARGE');
const QueueFullError = codedError('QueueFullError', 'ERR_PRESSURE_QUEUE_FULL');
const QueueTimeoutError = codedError('QueueTimeoutError', 'ERR_PRESSURE_QUEUE_TIMEOUT');
const BackendError = codedError('BackendError', 'ERR_PRESSURE_BACKEND');

const TASK_FAILED = 'ERR_PRESSURE_TASK_FAILED';

/** The addon's coded error (JSON in the message) as its typed class. */
function translate(e) {
  const text = e && typeof e.message === 'string' ? e.message : '';
  if (!text.startsWith('{"')) return e;
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return e;
  }
  if (!body || typeof body.code !== 'string' || !body.code.startsWith('ERR_PRESSURE_')) return e;
  const { code, message, ...fields } = body;
  if (code === 'ERR_PRESSURE_RATE_LIMITED') return new RateLimitedError(fields.retryAfterMs, message, fields);
  const Kind = BY_CODE.get(code);
  return Kind ? new Kind(message, fields) : new PressureError(message, code, fields);
}

function rethrow(e) {
  throw translate(e);
}

// ---------------------------------------------------------------- options

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** What a value is, for a message (`NaN`, `-1`, `10n`, `"5"`, `function`);
 * never throws (JSON.stringify would on a BigInt). */
function shown(v) {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === null) return 'null';
  return typeof v;
}

function checkKeys(obj, allowed, where) {
  if (obj === undefined) return {};
  if (!isObject(obj)) throw new ConfigError(`${where}: must be an object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) {
      throw new ConfigError(`${where}.${k}: unknown key (expected one of ${allowed.join(', ')})`, { field: k });
    }
  }
  return obj;
}

function count(v, name, dflt) {
  if (v === undefined || v === null) return dflt;
  if (!Number.isSafeInteger(v) || v < 0) {
    throw new ConfigError(`${name}: must be a non-negative integer, got ${shown(v)}`, { field: name });
  }
  return v;
}

function isBatch(priority, where) {
  if (priority === undefined || priority === 'interactive') return false;
  if (priority === 'batch') return true;
  throw new ConfigError(`${where}.priority: must be "interactive" or "batch", got ${JSON.stringify(priority)}`, {
    field: 'priority',
  });
}

/** `tokens` as a number (input tokens) or `{ input, output }`. */
function tokenPair(tokens, where) {
  if (tokens === undefined || tokens === null) return [0, 0];
  if (typeof tokens === 'number') return [count(tokens, `${where}.tokens`), 0];
  const t = checkKeys(tokens, ['input', 'output'], `${where}.tokens`);
  return [count(t.input, `${where}.tokens.input`, 0), count(t.output, `${where}.tokens.output`, 0)];
}

const ACQUIRE_KEYS = ['requests', 'tokens', 'inputTokens', 'outputTokens', 'costMicroUsd', 'priority'];

/** The redis option as the Rust `RedisConfig` object: a URL, a
 * comma-separated list of cluster node URLs, or a RedisConfig object. */
function redisConfig(redis) {
  if (typeof redis === 'string') {
    const nodes = redis
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    if (nodes.length === 0) throw new ConfigError('redis: must be a non-empty URL');
    return nodes.length > 1 ? { url: nodes[0], clusterNodes: nodes } : { url: nodes[0] };
  }
  if (isObject(redis)) return redis;
  throw new ConfigError('redis: must be a URL string or a RedisConfig object');
}

function resourceId(resource, where) {
  if (typeof resource !== 'string' || resource.length === 0) {
    const got = typeof resource === 'string' ? '""' : resource === null ? 'null' : typeof resource;
    throw new ConfigError(`${where}: resource must be a non-empty string, got ${got}`, { field: 'resource' });
  }
  return resource;
}


/**
 * `value` (options or limits) as the JSON text the addon parses. Plain
 * `JSON.stringify` would write NaN and ±Infinity as `null` — read as "not
 * set", so a limit would be dropped without a word — leave out functions and
 * symbols the same way, and throw a TypeError on a BigInt: each is a
 * ConfigError here instead, naming the key (`field`, e.g.
 * `limits.requestsPerSecond`). `undefined` stays "not set", as in TypeScript.
 */
function jsonOf(value, root, where) {
  const ancestors = new Set();
  const walk = (v, path) => {
    const t = typeof v;
    const bad =
      (t === 'number' && !Number.isFinite(v)) || t === 'bigint' || t === 'function' || t === 'symbol';
    if (bad) {
      const what = t === 'number' ? 'a finite number' : 'a number, string, boolean, object or array';
      throw new ConfigError(`${where}: ${path}: must be ${what}, got ${shown(v)}`, { field: path });
    }
    if (v === null || t !== 'object' || typeof v.toJSON === 'function') return;
    if (ancestors.has(v)) throw new ConfigError(`${where}: ${path}: refers to itself`, { field: path });
    ancestors.add(v);
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${path}[${i}]`));
    else for (const k of Object.keys(v)) if (v[k] !== undefined) walk(v[k], path ? `${path}.${k}` : k);
    ancestors.delete(v);
  };
  walk(value, root);
  return JSON.stringify(value);
}

// ---------------------------------------------------------------- results

/**
 * The answer of `tryAcquire`. Granted: `allowed` is true and the result holds
 * capacity until `release()` (or `await using` disposal, or garbage
 * collection as a last resort). Denied: `waitTimeMs` says when the same
 * demand could fit; `release()` is a no-op.
 */
class Acquisition {
  #native;

  constructor(n, allowed, waitTimeMs, dimension, unavailable) {
    this.#native = n;
    this.allowed = allowed;
    this.waitTimeMs = waitTimeMs;
    if (!allowed) {
      this.dimension = dimension;
      this.unavailable = unavailable;
    }
    // A function of its own, so `const { release } = await broker.tryAcquire(..)`
    // works as in the original design; shared when there is nothing to release.
    this.release = n === null ? releaseNothing : () => (n.releaseNow() ? RESOLVED : n.release().catch(rethrow));
  }

  /** Whether the permit still holds capacity (false after release, after a
   * denial, and for a grant on a resource with only request-rate limits,
   * which holds nothing). */
  get held() {
    return this.#native === null ? false : this.#native.held;
  }

  /** Corrects the token and money reservation to the actual usage. */
  async reconcile(actual = {}) {
    const a = checkKeys(actual, ['requests', 'inputTokens', 'outputTokens', 'costMicroUsd'], 'reconcile');
    const requests = count(a.requests, 'requests', 1);
    const input = count(a.inputTokens, 'inputTokens', 0);
    const output = count(a.outputTokens, 'outputTokens', 0);
    const cost = count(a.costMicroUsd, 'costMicroUsd', undefined);
    if (this.#native === null) return;
    await this.#native.reconcile(requests, input, output, cost).catch(rethrow);
  }

  [asyncDispose]() {
    return this.release();
  }
}

const RESOLVED = Promise.resolve();

function releaseNothing() {
  return RESOLVED;
}

/** The addon's answer (a NativeAcquisition, a plain denial, or 1 for a
 * grant that holds nothing) as an Acquisition. */
function acquisitionOf(a) {
  if (a === 1) return new Acquisition(null, true, 0);
  if (a instanceof native.NativeAcquisition) {
    return new Acquisition(a, a.allowed, a.waitTimeMs, a.dimension, a.unavailable);
  }
  return new Acquisition(null, false, a.waitTimeMs, a.dimension, a.unavailable);
}

const NATIVE = Symbol('native');

/** Limits checked once, for `lazyLimit` (per-tenant resources). Throws a
 * ConfigError naming the key when they are invalid. */
class LimitTemplate {
  constructor(limits) {
    if (!isObject(limits)) throw new ConfigError('LimitTemplate: limits must be an object');
    try {
      this[NATIVE] = new native.NativeLimitTemplate(jsonOf(limits, 'limits', 'LimitTemplate'));
    } catch (e) {
      rethrow(e);
    }
    this.limits = { ...limits };
  }
}

// ---------------------------------------------------------------- broker

/**
 * One broker: resources, their limits and queues, on one backend.
 *
 * `new ResourceBroker()` keeps state in this process. `new ResourceBroker({
 * redis })` shares it through Redis and connects lazily: every async method
 * waits for the connection, and Redis down at start is not fatal (the
 * backend's failure mode applies until it answers). `await
 * ResourceBroker.connect({ redis })` connects first and fails with the cause
 * when Redis does not answer.
 */
class ResourceBroker {
  #native = null;
  #ready = null;
  #error = null;
  #pending = [];
  #shadow = null;

  constructor(options) {
    if (options instanceof native.NativeBroker) {
      // From `ResourceBroker.connect`.
      this.#native = options;
      return;
    }
    const o = checkKeys(options, ['redis'], 'options');
    if (o.redis === undefined) {
      this.#native = new native.NativeBroker();
      return;
    }
    const json = jsonOf({ redis: redisConfig(o.redis), strict: false }, '', 'options');
    // Registrations made before the connection are checked at once on a
    // memory broker (same validation, same duplicate rule) and applied in
    // order when it is ready.
    this.#shadow = new native.NativeBroker();
    this.#ready = native.NativeBroker.connect(json).then(
      (n) => {
        for (const [kind, resource, arg] of this.#pending) {
          try {
            n[kind](resource, arg);
          } catch (e) {
            this.#error ??= translate(e);
          }
        }
        this.#pending = [];
        this.#shadow = null;
        this.#native = n;
      },
      (e) => {
        this.#error = translate(e);
      },
    );
  }

  /** Connects to Redis (or a Redis Cluster) first; rejects with a
   * `BackendError` naming the address and the cause when it does not answer. */
  static async connect(options) {
    const o = checkKeys(options, ['redis'], 'options');
    if (o.redis === undefined) return new ResourceBroker();
    const json = jsonOf({ redis: redisConfig(o.redis), strict: true }, '', 'options');
    const n = await native.NativeBroker.connect(json).catch(rethrow);
    return new ResourceBroker(n);
  }

  async #get() {
    if (this.#native === null && this.#ready !== null) await this.#ready;
    if (this.#error) throw this.#error;
    return this.#native;
  }

  #registerNow(kind, resource, arg) {
    const target = this.#native ?? this.#shadow;
    try {
      target[kind](resource, arg);
    } catch (e) {
      rethrow(e);
    }
    if (this.#native === null) this.#pending.push([kind, resource, arg]);
  }

  /** Registers a queue+execute resource: `{ limits, queue }` (queue:
   * maxQueued, maxWaitMs, interactiveBurst, batchHeadroom, maxRateLimitRetries). */
  register(resource, config) {
    resourceId(resource, 'register');
    checkKeys(config, ['limits', 'queue'], 'register options');
    this.#registerNow('register', resource, jsonOf(config ?? {}, '', 'register options'));
    return this;
  }

  /** Registers a check+reject resource with its limits (the gateway's
   * camelCase names: requestsPerSecond, maxConcurrentRequests, ...). */
  registerLimit(resource, limits) {
    resourceId(resource, 'registerLimit');
    if (!isObject(limits)) throw new ConfigError('registerLimit: limits must be an object');
    this.#registerNow('registerLimit', resource, jsonOf(limits, 'limits', 'registerLimit'));
    return this;
  }

  /**
   * Registers `resource` with the template's limits on first use (per-tenant
   * resources); their number is bounded — idle ones are evicted — so a flood
   * of distinct ids cannot exhaust memory. Idempotent; cheap once registered.
   */
  async lazyLimit(resource, template) {
    resourceId(resource, 'lazyLimit');
    if (!(template instanceof LimitTemplate)) throw new ConfigError('lazyLimit: template must be a LimitTemplate');
    const n = this.#native ?? (await this.#get());
    try {
      n.lazyLimit(resource, template[NATIVE]);
    } catch (e) {
      rethrow(e);
    }
  }

  /** Removes a resource; permits still held release normally. */
  unregister(resource) {
    resourceId(resource, 'unregister');
    const target = this.#native ?? this.#shadow;
    this.#pending = this.#pending.filter((p) => p[1] !== resource);
    return target.unregister(resource);
  }

  /** Check+reject: `{ allowed, waitTimeMs, release }` at once; a denial
   * consumes nothing. */
  async tryAcquire(resource, opts) {
    resourceId(resource, 'tryAcquire');
    const o = checkKeys(opts, ACQUIRE_KEYS, 'tryAcquire options');
    let [input, output] = tokenPair(o.tokens, 'tryAcquire options');
    input = count(o.inputTokens, 'tryAcquire options.inputTokens', input);
    output = count(o.outputTokens, 'tryAcquire options.outputTokens', output);
    const requests = count(o.requests, 'tryAcquire options.requests', 1);
    const cost = count(o.costMicroUsd, 'tryAcquire options.costMicroUsd', 0);
    const batch = isBatch(o.priority, 'tryAcquire options');
    const n = this.#native ?? (await this.#get());
    let a;
    try {
      a = n.tryAcquireNow(resource, requests, input, output, cost, batch);
      // 0: not answerable without a round trip (Redis).
      if (a === 0) a = await n.tryAcquire(resource, requests, input, output, cost, batch);
    } catch (e) {
      rethrow(e);
    }
    return acquisitionOf(a);
  }

  /**
   * Queue+execute: waits in the resource's priority queue until capacity
   * frees, then runs `execute({ attempt, reportUsage })`. A thrown
   * `RateLimitedError` is retried transparently by the core. Resolves to
   * `{ result, waitTimeMs, attempts }`; a task error is rethrown as is.
   */
  async enqueue(request) {
    const r = checkKeys(
      request,
      ['resource', 'tokens', 'costMicroUsd', 'priority', 'maxWaitMs', 'execute'],
      'enqueue request',
    );
    resourceId(r.resource, 'enqueue');
    if (typeof r.execute !== 'function') throw new ConfigError('enqueue request.execute: must be a function');
    const [input, output] = tokenPair(r.tokens, 'enqueue request');
    const cost = count(r.costMicroUsd, 'enqueue request.costMicroUsd', 0);
    const batch = isBatch(r.priority, 'enqueue request');
    const maxWaitMs = r.maxWaitMs === undefined ? null : count(r.maxWaitMs, 'enqueue request.maxWaitMs');
    const execute = r.execute;
    let value;
    // The last attempt's rejection, whatever it is (`undefined` and `null`
    // too: `threw` says whether there was one), rethrown as is.
    let error;
    let threw = false;
    const run = (attempt) => {
      let usage;
      const ctx = {
        attempt,
        reportUsage(u) {
          const x = checkKeys(u, ['requests', 'inputTokens', 'outputTokens', 'costMicroUsd'], 'reportUsage');
          usage = {
            requests: count(x.requests, 'requests', undefined),
            inputTokens: count(x.inputTokens, 'inputTokens', 0),
            outputTokens: count(x.outputTokens, 'outputTokens', 0),
            costMicroUsd: count(x.costMicroUsd, 'costMicroUsd', undefined),
          };
        },
      };
      return Promise.resolve()
        .then(() => execute(ctx))
        .then(
          (v) => {
            value = v;
            error = undefined;
            threw = false;
            return JSON.stringify({ ok: true, usage });
          },
          (e) => {
            error = e;
            threw = true;
            if (e instanceof RateLimitedError || (e && e.code === 'ERR_PRESSURE_RATE_LIMITED')) {
              const ms = typeof e.retryAfterMs === 'number' ? e.retryAfterMs : undefined;
              return JSON.stringify({ rateLimited: true, retryAfterMs: ms, usage });
            }
            return JSON.stringify({ failed: true, usage });
          },
        );
    };
    const n = this.#native ?? (await this.#get());
    let out;
    try {
      out = JSON.parse(await n.enqueue(r.resource, input, output, cost, batch, maxWaitMs, run));
    } catch (e) {
      const t = translate(e);
      if (t && t.code === TASK_FAILED && threw) throw error;
      if (t instanceof RateLimitedError && threw) {
        t.cause = error;
        if (error !== null && typeof error === 'object' && typeof error.retryAfterMs === 'number') {
          t.retryAfterMs = error.retryAfterMs;
        }
      }
      throw t;
    }
    return { result: value, waitTimeMs: out.waitTimeMs, attempts: out.attempts };
  }

  /** Every resource's snapshot (usage read from the backend), sorted by id.
   * Limit resources have `queued` and `waitTimeMs` null, never 0. */
  async getStats() {
    const n = await this.#get();
    const text = await n.stats().catch(rethrow);
    return JSON.parse(text).resources;
  }

  /** Whether the state is in this process (false: Redis). */
  get memory() {
    return this.#native ? this.#native.memory : false;
  }
}

module.exports = {
  ResourceBroker,
  Acquisition,
  LimitTemplate,
  PressureError,
  ConfigError,
  UnknownResourceError,
  DemandTooLargeError,
  QueueFullError,
  QueueTimeoutError,
  RateLimitedError,
  BackendError,
};
