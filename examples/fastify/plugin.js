'use strict';
// The original design's gateway pressure as a Fastify plugin, on
// @pressure-rs/broker (the Rust broker in-process, memory or Redis):
//
//   onRequest   route/service limit, before auth: a cheap floor against floods
//   preHandler  JWT auth (HS256, fast-jwt) and the per-tenant limit; the
//               tenant resource `gateway:tenant:<id>` is registered lazily
//   onResponse  and the raw socket's close: every permit of the request is
//               released exactly once, also when the client aborts
//
// A refusal is 429 with Retry-After (whole seconds, rounded up), or 401 for a
// token that is present but invalid (or missing when auth is required).

const { createVerifier } = require('fast-jwt');
const { LimitTemplate } = require('@pressure-rs/broker');

const PERMITS = Symbol('pressure.permits');

/** Releases every permit taken for `request`, once. */
function releaseAll(request) {
  const held = request[PERMITS];
  if (!held || held.done) return;
  held.done = true;
  for (const p of held.list) {
    p.release().catch((e) => request.log.error({ err: e }, 'pressure: release failed'));
  }
}

/** Charges `resource`; on a denial sends the refusal and returns false. */
async function charge(request, reply, broker, resource, layer) {
  const a = await broker.tryAcquire(resource);
  if (a.allowed) {
    const held = request[PERMITS];
    held.list.push(a);
    // Released already (the client went away while we awaited): give it back.
    if (held.done) await a.release();
    return true;
  }
  const retryAfter = Math.max(1, Math.ceil(a.waitTimeMs / 1000));
  const status = a.unavailable ? 503 : 429;
  reply
    .code(status)
    .header('retry-after', String(retryAfter))
    .send({
      error: {
        type: a.unavailable ? 'limiter_unavailable' : 'rate_limited',
        message: `${layer} limit reached on ${resource}`,
        resource,
        waitTimeMs: Math.ceil(a.waitTimeMs),
      },
    });
  return false;
}

/** The longest `prefix` of `routes` matching `path`. */
function routeOf(routes, path) {
  let best = null;
  for (const r of routes) {
    if (path.startsWith(r.prefix) && (!best || r.prefix.length > best.prefix.length)) best = r;
  }
  return best;
}

/**
 * Options:
 * - broker: a ResourceBroker
 * - routes: [{ prefix, resource, limits }] (registered now with registerLimit)
 * - tenant: { limits, secret, algorithms = ['HS256'], claim = 'namespaceId', required = false }
 */
async function pressurePlugin(fastify, opts) {
  const { broker } = opts;
  const routes = (opts.routes ?? []).map((r) => ({ ...r }));
  for (const r of routes) broker.registerLimit(r.resource, r.limits);
  const t = opts.tenant;
  const template = t ? new LimitTemplate(t.limits) : null;
  const claim = t?.claim ?? 'namespaceId';
  const verify = t
    ? createVerifier({ key: t.secret, algorithms: t.algorithms ?? ['HS256'], requiredClaims: ['exp'] })
    : null;

  fastify.addHook('onRequest', async (request, reply) => {
    request[PERMITS] = { list: [], done: false };
    // The raw socket's close covers both a finished response and an abort.
    reply.raw.once('close', () => releaseAll(request));
    const path = request.url.split('?', 1)[0];
    const route = routeOf(routes, path);
    if (route && !(await charge(request, reply, broker, route.resource, 'route'))) return reply;
  });

  fastify.addHook('preHandler', async (request, reply) => {
    if (!verify) return;
    const auth = request.headers.authorization;
    if (!auth) {
      if (t.required) return reply.code(401).send({ error: { type: 'unauthorized', message: 'missing bearer token' } });
      return; // anonymous: no tenant limit (webhooks carry no JWT)
    }
    const m = /^Bearer (.+)$/i.exec(auth);
    let tenant;
    try {
      if (!m) throw new Error('not a bearer token');
      tenant = verify(m[1])[claim];
      if (typeof tenant !== 'string' || tenant === '') throw new Error(`no ${claim} claim`);
    } catch (e) {
      return reply.code(401).send({ error: { type: 'unauthorized', message: `invalid token: ${e.message}` } });
    }
    request.tenant = tenant;
    const resource = `gateway:tenant:${tenant}`;
    await broker.lazyLimit(resource, template);
    if (!(await charge(request, reply, broker, resource, 'tenant'))) return reply;
  });

  fastify.addHook('onResponse', async (request) => releaseAll(request));
}

// Hooks apply to the whole app, not only to this plugin's scope (what
// fastify-plugin does).
pressurePlugin[Symbol.for('skip-override')] = true;
pressurePlugin[Symbol.for('fastify.display-name')] = 'pressure';

module.exports = { pressurePlugin };
