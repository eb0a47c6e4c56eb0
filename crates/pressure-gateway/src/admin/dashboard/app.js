// The pressure dashboard's script: reads one summary per second from
// /admin/pressure/events (the Server-Sent Events format, read with a
// streaming fetch so that it can carry the Authorization header; polls
// /admin/pressure/summary when the stream is refused or unsupported) and
// draws it. No framework, no build step: plain DOM and SVG. Every value from
// the server is written with textContent (tenant ids come from tokens and
// are never parsed as HTML). Rates and charts are computed here, from the
// differences between two summaries, so they cover the time since the page
// opened.
//
// The admin token: taken once from ?token= (then removed from the address
// bar) or from the prompt, kept in sessionStorage (this tab only), sent as
// "Authorization: Bearer" on every request. No cookie: cookies are not
// scoped by port and would reach the proxy listener and other local services.
(function () {
  const HISTORY = 300; // chart points kept (5 minutes at one per second)
  const WINDOW = 60; // the narrowest chart window, in points (a fresh page)
  const LEVELS = ["primary", "backup", "rules", "manual_queue"];
  const DIMENSIONS = [
    "requestsPerSecond", "requestsPerMinute", "tokensPerMinute",
    "inputTokensPerMinute", "outputTokensPerMinute", "maxConcurrentRequests",
    "requestsPerHour", "requestsPer24Hours",
    // Calendar budgets: spend against budget in the current UTC day or month.
    "requestsPerDay", "tokensPerDay", "costMicroUsdPerDay", "costMicroUsdPerMonth",
  ];
  const SHORT = {
    requestsPerSecond: "req/s", requestsPerMinute: "req/min", tokensPerMinute: "tok/min",
    inputTokensPerMinute: "in tok/min", outputTokensPerMinute: "out tok/min",
    maxConcurrentRequests: "concurrent", requestsPerHour: "req/h", requestsPer24Hours: "req/24h",
    requestsPerDay: "req today", tokensPerDay: "tok today",
    costMicroUsdPerDay: "today", costMicroUsdPerMonth: "this month",
  };
  const MONEY = new Set(["costMicroUsdPerDay", "costMicroUsdPerMonth"]);
  const SVG = "http://www.w3.org/2000/svg";

  const TOKEN_KEY = "pressure-admin-token";
  const RETRY_MS = 2000;
  const params = new URLSearchParams(location.search);
  if (params.has("token")) {
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : ""));
  }
  const top = params.get("top") || "20";

  function headers() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: "Bearer " + token } : {};
  }

  const state = {
    updates: 0,
    last: null, // { at, counters: Map(key -> {allowed, denied}), answers, }
    rates: [], // { allowed, denied } per interval
    answers: [], // { level -> answers per second } per interval
  };

  // ------------------------------------------------------------ helpers

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = String(text);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function cell(field, value, cls) {
    const td = el("td", { "data-field": field, class: cls || "num" }, value);
    td.setAttribute("data-value", String(value));
    return td;
  }

  // The denied count; with would-be refusals of a shadow limit beside it
  // (`data-shadow-denied`), which were admitted.
  function deniedCell(denied, shadowDenied) {
    const td = cell("denied", denied);
    if (shadowDenied > 0) {
      td.setAttribute("data-shadow-denied", String(shadowDenied));
      td.append(el("span", { class: "shadow-denied", title: "would-be refusals of a shadow limit (admitted)" },
        ` (${shadowDenied} shadow)`));
    }
    return td;
  }

  function rate(n) {
    if (!Number.isFinite(n) || n <= 0) return "0";
    return n >= 10 ? n.toFixed(0) : n.toFixed(1);
  }

  function usd(micro) {
    const d = micro / 1e6;
    return "$" + (d >= 1 ? d.toFixed(2) : d.toFixed(6).replace(/0+$/, "").replace(/\.$/, ""));
  }

  function ago(ms) {
    if (ms < 1000) return ms + " ms ago";
    if (ms < 120000) return Math.round(ms / 1000) + " s ago";
    return Math.round(ms / 60000) + " min ago";
  }

  // Usage against each configured limit, as small bars.
  function limitBars(limits, usage) {
    const box = el("div", { class: "bars" });
    for (const d of DIMENSIONS) {
      const limit = limits && limits[d];
      if (!limit) continue;
      const used = (usage && usage[d]) || 0;
      const share = Math.min(1, used / limit);
      const bar = el("div", { class: "bar", "data-dimension": d, title: d });
      const fill = el("span", { class: share >= 1 ? "fill full" : share >= 0.8 ? "fill warn" : "fill" });
      fill.style.width = (share * 100).toFixed(1) + "%";
      const shown = MONEY.has(d) ? `${usd(used)}/${usd(limit)}` : `${used}/${limit}`;
      bar.append(fill, el("em", {}, `${shown} ${SHORT[d]}`));
      box.append(bar);
    }
    if (!box.childElementCount) box.append(el("span", { class: "muted" }, "no limit"));
    return box;
  }

  // Per-second differences of one counter since the previous summary.
  function perSecond(key, now, dt) {
    const before = state.last && state.last.counters.get(key);
    if (!before || dt <= 0) return { allowed: 0, denied: 0 };
    return {
      allowed: Math.max(0, now.allowed - before.allowed) / dt,
      denied: Math.max(0, now.denied - before.denied) / dt,
    };
  }

  function push(list, item) {
    list.push(item);
    if (list.length > HISTORY) list.shift();
  }

  // ------------------------------------------------------------ charts

  // Points across the chart: a minute at first, up to five as history grows.
  function span(n) {
    return Math.min(HISTORY, Math.max(WINDOW, n));
  }

  function lineChart(node, series, width, height) {
    node.replaceChildren();
    const max = Math.max(1, ...series.flatMap((s) => s.points));
    for (let i = 1; i <= 3; i++) {
      const y = height - (height * i) / 4;
      node.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, class: "grid" }));
    }
    for (const s of series) {
      if (!s.points.length) continue;
      const step = width / (span(s.points.length) - 1);
      const x0 = width - (s.points.length - 1) * step;
      const d = s.points
        .map((p, i) => `${i ? "L" : "M"}${(x0 + i * step).toFixed(1)},${(height - (p / max) * (height - 8)).toFixed(1)}`)
        .join(" ");
      node.append(svg("path", { d, class: "line " + s.cls }));
    }
    const label = svg("text", { x: 4, y: 12, class: "axis" });
    label.textContent = rate(max) + "/s";
    node.append(label);
  }

  function stackedBars(node, rows, width, height) {
    node.replaceChildren();
    const totals = rows.map((r) => LEVELS.reduce((a, l) => a + (r[l] || 0), 0));
    const max = Math.max(1, ...totals);
    const w = width / span(rows.length);
    rows.forEach((r, i) => {
      let y = height;
      const x = width - (rows.length - i) * w;
      for (const l of LEVELS) {
        const h = ((r[l] || 0) / max) * (height - 8);
        if (h <= 0) continue;
        y -= h;
        node.append(svg("rect", { x: x.toFixed(1), y: y.toFixed(1), width: Math.max(1, w - 0.5).toFixed(1), height: h.toFixed(1), class: "level " + l }));
      }
    });
    const label = svg("text", { x: 4, y: 12, class: "axis" });
    label.textContent = rate(max) + "/s";
    node.append(label);
  }

  // ------------------------------------------------------------ render

  function render(s) {
    const at = performance.now();
    const dt = state.last ? (at - state.last.at) / 1000 : 0;
    const counters = new Map();
    let allowedRate = 0;
    let deniedRate = 0;

    // resources
    const rows = [];
    for (const r of s.resources) {
      const now = { allowed: r.allowed, denied: r.denied };
      counters.set("r:" + r.resource, now);
      const ps = perSecond("r:" + r.resource, now, dt);
      allowedRate += ps.allowed;
      deniedRate += ps.denied;
      const tr = el("tr", { "data-resource": r.resource, "data-kind": r.kind });
      if (ps.denied > 0) tr.classList.add("denying");
      const name = el("td", { class: "name" });
      name.append(el("code", {}, r.resource), el("span", { class: "tag" }, r.kind));
      if (r.limits && r.limits.shadow) {
        // A shadow limit decides and counts but admits: marked, and its
        // would-be refusals shown beside its denials.
        tr.setAttribute("data-shadow", "true");
        name.append(el("span", { class: "tag shadow", title: "shadow: refusals are counted, not enforced" }, "shadow"));
      }
      const bars = el("td");
      bars.append(limitBars(r.limits, r.usage));
      tr.append(
        name, bars,
        cell("active", r.active === null ? "–" : r.active),
        cell("allowed", r.allowed),
        deniedCell(r.denied, r.shadowDenied || 0),
        cell("allowedRate", rate(ps.allowed)),
        cell("deniedRate", rate(ps.denied)),
        cell("backendErrors", r.backendErrors),
      );
      rows.push(tr);
    }
    document.getElementById("resources").replaceChildren(...rows);

    // tenants
    const t = s.tenants;
    const tenantsNow = { allowed: t.allowed, denied: t.denied };
    counters.set("tenants", tenantsNow);
    const tps = perSecond("tenants", tenantsNow, dt);
    allowedRate += tps.allowed;
    deniedRate += tps.denied;
    const totals = document.getElementById("tenant-totals");
    totals.textContent = `${t.count} tenants · ${t.allowed} allowed · ${t.denied} denied · ` +
      (t.shadowDenied > 0 ? `${t.shadowDenied} of them shadow (admitted) · ` : "") +
      `${t.denying} refused at least once · top ${t.top.length} shown`;
    totals.setAttribute("data-count", t.count);
    totals.setAttribute("data-denied", t.denied);
    const trows = t.top.map((x) => {
      const now = { allowed: x.allowed, denied: x.denied };
      counters.set("t:" + x.resource, now);
      const ps = perSecond("t:" + x.resource, now, dt);
      const tr = el("tr", { "data-tenant": x.tenant });
      if (ps.denied > 0) tr.classList.add("denying");
      const bars = el("td");
      bars.append(limitBars(x.limits, x.usage));
      tr.append(el("td", { class: "name", "data-field": "tenant" }, x.tenant), bars,
        cell("allowed", x.allowed), deniedCell(x.denied, x.shadowDenied || 0), cell("deniedRate", rate(ps.denied)));
      if (x.limits && x.limits.shadow) tr.setAttribute("data-shadow", "true");
      return tr;
    });
    if (!trows.length) {
      const tr = el("tr");
      tr.append(el("td", { colspan: 5, class: "muted" }, "no tenant yet"));
      trows.push(tr);
    }
    document.getElementById("tenants").replaceChildren(...trows);

    // traffic chart
    if (state.last) push(state.rates, { allowed: allowedRate, denied: deniedRate });
    const chart = document.getElementById("rates");
    lineChart(chart, [
      { cls: "allowed", points: state.rates.map((p) => p.allowed) },
      { cls: "denied", points: state.rates.map((p) => p.denied) },
    ], 600, 140);
    const peak = (k) => Math.max(0, ...state.rates.map((p) => p[k]));
    chart.setAttribute("data-max-allowed", peak("allowed").toFixed(2));
    chart.setAttribute("data-max-denied", peak("denied").toFixed(2));

    renderHierarchy(s.hierarchy);
    renderLlm(s.llm, dt);
    renderHealth(s.health);

    state.last = { at, counters, answers: s.llm ? s.llm.answers : {} };
    state.updates += 1;
    document.body.setAttribute("data-updates", String(state.updates));
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  // The tenant hierarchy as a tree: each node its budgets (spend of its
  // subtree against its own budget) and its children under it.
  function renderHierarchy(h) {
    const section = document.getElementById("hierarchy-section");
    const nodes = h ? h.nodes : [];
    section.hidden = nodes.length === 0;
    document.getElementById("hierarchy-note").textContent =
      `${nodes.length} levels` + (h && h.truncated ? " (more not shown)" : "");
    const items = new Map();
    const roots = [];
    for (const n of nodes) {
      const li = el("li", { "data-tenant": n.tenant, "data-parent": n.parent || "" });
      li.append(el("code", {}, n.tenant));
      for (const b of n.budgets) {
        const pct = b.budget ? Math.min(100, (100 * b.spent) / b.budget) : 0;
        const bar = el("span", { class: "budget", "data-dimension": b.dimension, "data-spent": b.spent,
          "data-budget": b.budget, title: `${b.dimension}: ${usd(b.spent)} of ${usd(b.budget)}` },
          ` ${usd(b.spent)} / ${usd(b.budget)} (${pct.toFixed(0)}%)`);
        if (pct >= 100) bar.classList.add("spent");
        li.append(bar);
      }
      li.append(el("ul"));
      items.set(n.tenant, li);
      const parent = n.parent && items.get(n.parent);
      if (parent) parent.lastChild.append(li);
      else roots.push(li);
    }
    document.getElementById("hierarchy").replaceChildren(...roots);
  }

  function renderLlm(llm, dt) {
    document.getElementById("no-llm").hidden = !!llm;
    document.getElementById("llm").hidden = !llm;
    if (!llm) return;

    const spent = document.querySelector('[data-field="failedSpentMicroUsd"]');
    spent.textContent = usd(llm.failedSpentMicroUsd);
    spent.setAttribute("data-value", String(llm.failedSpentMicroUsd));

    const levels = document.getElementById("levels");
    levels.replaceChildren(...LEVELS.map((l) => {
      const span = el("span", { class: "level-count", "data-level": l, "data-value": llm.answers[l] || 0 });
      span.append(el("span", { class: "key " + l }), el("b", {}, llm.answers[l] || 0), " " + l.replace("_", " "));
      return span;
    }));
    if (state.last && dt > 0) {
      const row = {};
      for (const l of LEVELS) row[l] = Math.max(0, (llm.answers[l] || 0) - (state.last.answers[l] || 0)) / dt;
      push(state.answers, row);
    }
    stackedBars(document.getElementById("answers"), state.answers, 600, 120);

    const rows = llm.breakers.map((b) => {
      const tr = el("tr", { "data-breaker": `${b.provider}/${b.model}`, "data-state": b.state, class: "state-" + b.state });
      tr.append(
        el("td", { class: "name" }, `${b.provider}/${b.model}`),
        el("td", { "data-field": "state" }, b.state),
        cell("calls", b.calls), cell("failures", b.failures),
        cell("failureRate", (b.failureRate * 100).toFixed(0) + "%"),
        cell("timesOpened", b.timesOpened), cell("rejected", b.rejected),
        cell("retryInMs", b.retryInMs ? Math.ceil(b.retryInMs / 1000) + " s" : "–"),
      );
      return tr;
    });
    document.getElementById("breakers").replaceChildren(...rows);

    const items = llm.transitions.map((x) => {
      const li = el("li", { "data-transition": "", "data-breaker": x.breaker, "data-from": x.from, "data-to": x.to });
      li.append(el("span", { class: "muted" }, ago(x.msAgo) + " "), el("code", {}, x.breaker), " ",
        el("b", { class: "state-" + x.from }, x.from), " → ", el("b", { class: "state-" + x.to }, x.to),
        el("span", { class: "muted" }, ` (${x.reason}, ${x.calls} calls, ${(x.failureRate * 100).toFixed(0)}% failed)`));
      return li;
    });
    if (!items.length) items.push(el("li", { class: "muted" }, "none yet"));
    document.getElementById("transitions").replaceChildren(...items);
  }

  function renderHealth(h) {
    const node = document.getElementById("health");
    node.setAttribute("data-status", h.status);
    node.setAttribute("data-ready", String(h.ready));
    let text = `store: ${h.backend} ${h.status}`;
    if (h.redis) text += ` (${h.redis.url}${h.redis.error && !h.redis.healthy ? ": " + h.redis.error : ""})`;
    if (!h.ready) text += " · draining";
    node.textContent = text;
    node.className = "badge " + (h.status === "ok" && h.ready ? "ok" : "bad");
  }

  function link(status, text) {
    const node = document.getElementById("link");
    node.setAttribute("data-status", status);
    node.textContent = text;
    node.className = "badge " + (status === "live" || status === "polling" ? "ok" : "bad");
  }

  // ------------------------------------------------------------ transport

  let polling = null;
  let generation = 0; // bumped on a new token: older loops stop

  function askToken(message) {
    link("token", message);
    document.getElementById("login").hidden = false;
  }

  document.getElementById("login").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token-input");
    if (!input.value) return;
    sessionStorage.setItem(TOKEN_KEY, input.value);
    input.value = "";
    document.getElementById("login").hidden = true;
    if (polling) clearInterval(polling);
    polling = null;
    stream(++generation);
  });

  function poll(gen) {
    if (polling) return;
    const once = () => fetch(`/admin/pressure/summary?top=${encodeURIComponent(top)}`, { headers: headers(), cache: "no-store" })
      .then((r) => {
        if (r.status === 401) {
          clearInterval(polling);
          polling = null;
          askToken("token required");
          return null;
        }
        if (!r.ok) throw new Error("summary answered " + r.status);
        return r.json();
      })
      .then((s) => { if (s && gen === generation) { render(s); link("polling", "polling"); } })
      .catch((e) => link("down", String(e.message || e)));
    once();
    polling = setInterval(once, RETRY_MS);
  }

  // Splits "event: ...\ndata: ...\n\n" blocks; calls onEvent(name, data).
  function sseParser(onEvent) {
    let buffer = "";
    return (chunk) => {
      buffer += chunk.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onEvent(name, data.join("\n"));
      }
    };
  }

  async function stream(gen) {
    let response;
    try {
      response = await fetch(`/admin/pressure/events?top=${encodeURIComponent(top)}`, {
        headers: { ...headers(), Accept: "text/event-stream" }, cache: "no-store",
      });
    } catch (e) {
      link("reconnecting", "reconnecting…");
      setTimeout(() => gen === generation && stream(gen), RETRY_MS);
      return;
    }
    if (response.status === 401) return askToken("token required");
    if (!response.ok || !response.body || !window.TextDecoderStream) return poll(gen);
    const feed = sseParser((name, data) => {
      if (name !== "summary" || gen !== generation) return;
      link("live", "live");
      render(JSON.parse(data));
    });
    try {
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== generation) break;
        feed(value);
      }
    } catch (e) {
      // the connection broke: reconnect below
    }
    if (gen !== generation) return;
    link("reconnecting", "reconnecting…");
    setTimeout(() => gen === generation && stream(gen), RETRY_MS);
  }

  stream(generation);
})();
