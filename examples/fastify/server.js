'use strict';
// Runs the example: PORT (default 3000), JWT_SECRET (HS256), REDIS_URL
// (optional: memory without it).

const { ResourceBroker } = require('@pressure-rs/broker');
const { buildApp } = require('./app');

async function main() {
  const broker = process.env.REDIS_URL
    ? await ResourceBroker.connect({ redis: process.env.REDIS_URL })
    : new ResourceBroker();
  const secret = process.env.JWT_SECRET;
  if (!secret) throw new Error('JWT_SECRET is not set (the HS256 secret of the tenant tokens)');
  const app = buildApp(broker, {
    routes: [
      { prefix: '/api', resource: 'gateway:service:api', limits: { requestsPerSecond: 50 } },
      { prefix: '/webhooks/github', resource: 'gateway:route:webhooks-github', limits: { requestsPerSecond: 5, maxConcurrentRequests: 20 } },
    ],
    tenant: { secret, limits: { requestsPerMinute: 600 } },
  });
  const address = await app.listen({ port: Number(process.env.PORT ?? 3000), host: '127.0.0.1' });
  console.log(`listening on ${address}`);
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
