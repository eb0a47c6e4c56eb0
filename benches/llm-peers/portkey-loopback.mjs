// Starts Portkey's gateway (build/start-server.js of @portkey-ai/gateway)
// listening on 127.0.0.1 only: its start script has a --port= flag but no
// host flag, and @hono/node-server's serve() then listens on every interface.
// This wrapper fills in the host of every server.listen(port, host, cb) call
// left without one, then imports the start script unchanged.
//
// Usage: PORTKEY_START=/path/to/build/start-server.js \
//          node portkey-loopback.mjs --port=PORT --headless
import net from "node:net";
import { pathToFileURL } from "node:url";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    if (args[1] === undefined || args[1] === null) {
      args[1] = "127.0.0.1";
    } else if (typeof args[1] !== "string") {
      args.splice(1, 0, "127.0.0.1");
    }
  } else if (first && typeof first === "object" && !first.path && !first.host) {
    args[0] = { ...first, host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};

const start = process.env.PORTKEY_START;
if (!start) {
  console.error("portkey-loopback: PORTKEY_START (path of build/start-server.js) is not set");
  process.exit(2);
}
await import(pathToFileURL(start).href);
