'use strict';
// The example app: the pressure plugin in front of three tiny handlers.

const Fastify = require('fastify');
const { pressurePlugin } = require('./plugin');

/** Builds the app on `broker`; `options` go to the plugin (routes, tenant). */
function buildApp(broker, options) {
  const app = Fastify({ logger: false });
  app.register(pressurePlugin, { broker, ...options });
  app.get('/api/hello', async (request) => ({ hello: request.tenant ?? 'anonymous' }));
  app.post('/webhooks/github', async () => ({ ok: true }));
  // Answers after `ms` (default 10 s): for slots held by slow requests.
  app.get('/api/slow', async (request) => {
    const ms = Number(request.query.ms ?? 10_000);
    await new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      request.raw.once('close', () => {
        clearTimeout(t);
        resolve();
      });
    });
    return { slow: true };
  });
  return app;
}

module.exports = { buildApp };
