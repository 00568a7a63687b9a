// The egress-proxies console: hash routes, a poll every half second of the shown view's JSON,
// tables built with textContent only (no HTML from data). No dependencies.
"use strict";

const API = "/console/api/v1";
const POLL_MS = 500;
const SVG = "http://www.w3.org/2000/svg";
const state = { token: sessionStorage.getItem("consoleToken"), session: null, timer: null,
  sort: {}, filters: { pool: "", phase: "", attr: "" }, generation: 0, shown: null, drawnAt: 0 };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

async function api(path, options) {
  const response = await fetch(API + path, { ...options, headers: {
    "Authorization": "Bearer " + state.token, ...(options && options.headers) } });
  const body = await response.json().catch(() => ({ error: "bad_response", detail: response.statusText }));
  if (!response.ok) { const error = new Error(body.detail || body.error); error.status = response.status; throw error; }
  return body;
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return Math.round(seconds) + "s";
  if (seconds < 5400) return Math.round(seconds / 60) + "m";
  if (seconds < 172800) return Math.round(seconds / 3600) + "h";
  return Math.round(seconds / 86400) + "d";
}

function since(epoch, now) { return epoch ? ago(now - epoch) + " ago" : "never"; }

function sparkline(values) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 90 18");
  const known = values.map((v, i) => [i, v]).filter(([, v]) => v !== null);
  if (known.length > 0) {
    const max = 1.25 * Math.max(...known.map(([, v]) => v), 1);
    const step = 90 / Math.max(values.length - 1, 1);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", known.map(([i, v]) => `${(i * step).toFixed(1)},${(17 - 16 * v / max).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  return svg;
}

function table(columns, rows, key, view) {
  const sort = state.sort[view] || { column: null, descending: false };
  const head = el("tr", {}, ...columns.map((column) => el("th", {
    "data-col": column.id, text: column.title,
    class: sort.column === column.id ? (sort.descending ? "sorted-desc" : "sorted-asc") : null,
    onclick: () => { state.sort[view] = { column: column.id, descending: sort.column === column.id && !sort.descending }; refresh(); },
  })));
  const sorter = columns.find((column) => column.id === sort.column);
  if (sorter) {
    const value = sorter.sort || sorter.value;
    rows = [...rows].sort((a, b) => {
      const x = value(a), y = value(b);
      const order = x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
      return sort.descending ? -order : order;
    });
  }
  const body = el("tbody");
  for (const row of rows) {
    const tr = el("tr", { "data-key": key(row), class: row.cordoned ? "cordoned" : null });
    for (const column of columns) {
      const cell = column.cell ? column.cell(row) : column.value(row);
      tr.append(el("td", { "data-col": column.id, class: column.numeric ? "num" : null },
        cell instanceof Node ? cell : String(cell === null || cell === undefined ? "–" : cell)));
    }
    body.append(tr);
  }
  return el("table", { "data-view": view }, el("thead", {}, head), body);
}

function yesNo(value) {
  return el("span", { class: value === "True" ? "yes" : value === "False" ? "no" : null, text: value || "–" });
}

function select(id, label, options, current, onchange) {
  return el("label", {}, label + " ", el("select", { id, onchange: (event) => onchange(event.target.value) },
    el("option", { value: "", text: "all" }),
    ...options.map((option) => el("option", { value: option, text: option, selected: option === current }))));
}

async function act(path, body) {
  try {
    await api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    $("action-error").textContent = "";
  } catch (error) {
    $("action-error").textContent = error.message;
  }
  refresh();
}

const views = {
  fleet: {
    path: () => "/fleet",
    toolbar(data) {
      const pools = [...new Set(data.proxies.map((p) => p.pool).filter(Boolean))].sort();
      const phases = [...new Set(data.proxies.map((p) => p.phase).filter(Boolean))].sort();
      const f = state.filters;
      return [
        select("filter-pool", "Pool", pools, f.pool, (v) => { f.pool = v; refresh(); }),
        select("filter-phase", "Phase", phases, f.phase, (v) => { f.phase = v; refresh(); }),
        el("label", {}, "Attribute ", el("input", { id: "filter-attr", placeholder: "key=value", value: f.attr,
          onchange: (event) => { f.attr = event.target.value.trim(); refresh(); } })),
        el("span", { id: "fleet-count", text: `${data.count} proxies` }),
      ];
    },
    render(data) {
      const f = state.filters;
      const [attrKey, attrValue] = f.attr.includes("=") ? f.attr.split(/=(.*)/s) : [f.attr, null];
      const rows = data.proxies.filter((p) => (!f.pool || p.pool === f.pool) && (!f.phase || p.phase === f.phase)
        && (!attrKey || (attrKey in p.attributes && (attrValue === null || p.attributes[attrKey] === attrValue))));
      const columns = [
        { id: "proxy", title: "Proxy", value: (p) => p.key },
        { id: "pool", title: "Pool", value: (p) => p.pool },
        { id: "provider", title: "Provider", value: (p) => p.provider },
        { id: "phase", title: "Phase", value: (p) => p.phase },
        { id: "ready", title: "Ready", value: (p) => p.ready, cell: (p) => yesNo(p.ready) },
        { id: "healthy", title: "Health", value: (p) => p.healthy, cell: (p) => yesNo(p.healthy) },
        { id: "latency", title: `Latency (${ago(state.session.historySeconds)})`, value: (p) => p.latencyMillis,
          cell: (p) => el("span", {}, sparkline(p.latencyHistory), ` ${p.latencyMillis === null ? "–" : p.latencyMillis + " ms"}`) },
        { id: "address", title: "Egress", value: (p) => p.address },
        { id: "leases", title: "Leases", numeric: true, value: (p) => p.leases, cell: (p) => `${p.leases} / ${p.maxLeases}` },
        { id: "cooldowns", title: "Cooling", numeric: true, value: (p) => p.cooldowns },
        { id: "bans", title: "Bans 24 h", numeric: true, value: (p) => p.bansLastDay },
        { id: "age", title: "Age", value: (p) => p.createdAt, sort: (p) => -Date.parse(p.createdAt || 0),
          cell: (p) => p.createdAt ? ago((Date.now() - Date.parse(p.createdAt)) / 1000) : "–" },
        { id: "cordoned", title: "Cordoned", value: (p) => p.cordoned ? "yes" : "no" },
        { id: "draining", title: "Draining", value: (p) => p.draining ? "yes" : "no" },
      ];
      if (state.session.mayAct) {
        const proxyPath = (p, action) => `/proxies/${encodeURIComponent(p.namespace)}/${encodeURIComponent(p.name)}/${action}`;
        columns.push({ id: "action", title: "", value: () => "", cell: (p) => el("span", {},
          el("button", { type: "button", "data-action": p.cordoned ? "uncordon" : "cordon", text: p.cordoned ? "Uncordon" : "Cordon",
            onclick: () => act(proxyPath(p, "cordon"), { cordoned: !p.cordoned }) }),
          p.pool && !p.draining ? el("button", { type: "button", "data-action": "drain", text: "Replace", title: "drain it; its pool creates a replacement",
            onclick: () => act(proxyPath(p, "drain"), {}) }) : null) });
      }
      return table(columns, rows, (p) => p.key, "fleet");
    },
  },
  sites: {
    path: () => "/sites",
    render(data) {
      return table([
        { id: "site", title: "Site", value: (s) => s.target, cell: (s) => el("a", { href: "#/sites/" + encodeURIComponent(s.target), text: s.target }) },
        { id: "pace", title: "Fleet pace (pages/s)", numeric: true, value: (s) => s.fleetPace },
        { id: "proxies", title: "Proxies", numeric: true, value: (s) => s.proxies },
        { id: "lowered", title: "Last lowered", value: (s) => s.lastLoweredAt, cell: (s) => since(s.lastLoweredAt, data.now) },
        { id: "limited", title: "Rate limited (1 h)", numeric: true, value: (s) => s.rateLimitedShare, cell: (s) => (100 * s.rateLimitedShare).toFixed(1) + " %" },
        { id: "banned", title: "Banned (1 h)", numeric: true, value: (s) => s.bannedShare, cell: (s) => (100 * s.bannedShare).toFixed(1) + " %" },
        { id: "leases", title: "Leases", numeric: true, value: (s) => s.leases },
        { id: "waiting", title: "Waiting", numeric: true, value: (s) => s.waitingHeld },
      ], data.sites, (s) => s.target, "sites");
    },
  },
  site: {
    path: (target) => "/sites/" + encodeURIComponent(target),
    render(data) {
      const summary = el("div", { class: "summary" },
        el("div", {}, el("strong", { id: "site-pace", text: data.fleetPace.toFixed(3) }), "pages/s the fleet may fetch"),
        el("div", {}, el("strong", { text: since(data.lastLoweredAt, data.now) }), "pace last lowered"),
        el("div", {}, el("strong", { id: "site-limited", text: String(data.reports.rateLimited) }), "rate limits (1 h)"),
        el("div", {}, el("strong", { text: String(data.reports.banned) }), "bans (1 h)"));
      return el("div", {}, el("h2", { id: "site-name", text: data.target }), summary, chart(data),
        table([
          { id: "proxy", title: "Proxy", value: (p) => p.proxy },
          { id: "pace", title: "Pace (requests/s)", numeric: true, value: (p) => p.pace },
          { id: "seen", title: "Last seen", value: (p) => p.seenAt, cell: (p) => since(p.seenAt, data.now) },
        ], data.paces, (p) => p.proxy, "site"));
    },
  },
  cooldowns: {
    path: () => "/cooldowns",
    render(data) {
      const columns = [
        { id: "proxy", title: "Proxy", value: (c) => c.proxy },
        { id: "site", title: "Site", value: (c) => c.target, cell: (c) => c.target || "(every site)" },
        { id: "kind", title: "Why", value: (c) => c.kind },
        { id: "left", title: "Time left", numeric: true, value: (c) => c.secondsLeft, cell: (c) => ago(c.secondsLeft) },
      ];
      if (state.session.mayAct) {
        columns.push({ id: "action", title: "", value: () => "", cell: (c) => {
          const [namespace, name] = c.proxy.split("/");
          return el("button", { type: "button", "data-action": "clear-cooldown", text: "Clear", title: "end this cooldown now",
            onclick: () => act(`/proxies/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/clear-cooldown`, { target: c.target }) });
        } });
      }
      return table(columns, data.cooldowns, (c) => `${c.proxy} ${c.target || ""}`, "cooldowns");
    },
  },
  pools: {
    path: () => "/pools",
    render(data) {
      const columns = [
        { id: "pool", title: "Pool", value: (p) => p.key },
        { id: "replicas", title: "Desired", numeric: true, value: (p) => p.replicas },
        { id: "current", title: "Current", numeric: true, value: (p) => p.current },
        { id: "ready", title: "Ready", numeric: true, value: (p) => p.ready },
        { id: "leased", title: "Leased", numeric: true, value: (p) => p.leased },
        { id: "draining", title: "Draining", numeric: true, value: (p) => p.draining },
        { id: "autoscale", title: "Autoscale", value: (p) => p.maxReplicas, cell: (p) => p.maxReplicas ? `${p.minReplicas}..${p.maxReplicas}` : "off" },
        { id: "hash", title: "Template", value: (p) => p.templateHash },
        { id: "events", title: "Decisions (Events)", value: (p) => p.events.length, cell: (p) => el("div", { class: "events" },
          ...p.events.map((e) => el("div", { text: `${since(e.at, data.now)} ${e.reason}: ${e.message}` }))) },
      ];
      if (state.session.mayAct) {
        columns.push({ id: "action", title: "", value: () => "", cell: (p) => {
          const input = el("input", { type: "number", min: 0, max: 1000, value: p.replicas, class: "replicas", "aria-label": "replicas" });
          return el("span", {}, input, el("button", { type: "button", "data-action": "scale", text: "Scale",
            onclick: () => act(`/pools/${encodeURIComponent(p.namespace)}/${encodeURIComponent(p.name)}/scale`, { replicas: Number(input.value) }) }));
        } });
      }
      return table(columns, data.pools, (p) => p.key, "pools");
    },
  },
  leases: {
    path: () => "/leases",
    render(data) {
      return table([
        { id: "lease", title: "Lease", value: (l) => l.leaseId },
        { id: "holder", title: "Token", value: (l) => l.holder, cell: (l) => l.holder || "–" },
        { id: "proxy", title: "Proxy", value: (l) => l.proxy },
        { id: "site", title: "Site", value: (l) => l.target, cell: (l) => l.target || "(any)" },
        { id: "age", title: "Age", numeric: true, value: (l) => l.ageSeconds, cell: (l) => ago(l.ageSeconds) },
        { id: "ttl", title: "TTL left", numeric: true, value: (l) => l.ttlLeftSeconds, cell: (l) => ago(l.ttlLeftSeconds) },
      ], data.leases, (l) => l.leaseId, "leases");
    },
  },
};

function chart(data) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("id", "pace-chart");
  svg.setAttribute("viewBox", "0 0 900 220");
  const times = data.paceHistory.times, values = data.paceHistory.values, span = data.paceHistory.spanSeconds;
  const start = times.length ? Math.min(times[0], data.now - span) : data.now - span;
  const x = (t) => 40 + 850 * (t - start) / Math.max(data.now - start, 1);
  const max = Math.max(1e-3, ...values.filter((v) => v !== null), data.fleetPace);
  const y = (v) => 205 - 190 * v / max;
  const points = times.map((t, i) => [t, values[i]]).filter(([, v]) => v !== null);
  points.push([data.now, data.fleetPace]);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
  svg.append(line);
  for (const at of data.rateLimits.filter((t) => t >= start)) {
    const mark = document.createElementNS(SVG, "line");
    mark.setAttribute("class", "limit");
    for (const [name, value] of [["x1", x(at)], ["x2", x(at)], ["y1", 10], ["y2", 205]]) mark.setAttribute(name, value.toFixed(1));
    svg.append(mark);
  }
  for (const [text, px, py] of [[max.toFixed(2) + "/s", 2, 18], ["0", 2, 205], [ago(data.now - start) + " ago", 40, 218], ["now", 870, 218]]) {
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", px); label.setAttribute("y", py); label.textContent = text;
    svg.append(label);
  }
  return svg;
}

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  if (hash.startsWith("sites/")) return ["site", hash.slice("sites/".length)];
  return [views[hash] && hash !== "site" ? hash : "fleet", null];
}

async function refresh() {
  if (!state.session) return;
  const [name, argument] = route();
  const view = views[name];
  const generation = ++state.generation;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.view === (name === "site" ? "sites" : name));
  try {
    const data = await api(view.path(argument));
    if (generation !== state.generation) return;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    $("problem").textContent = "";
    // Unchanged data is drawn again only every 10 s (ages move): a click seldom lands
    // on a row being replaced.
    const shown = JSON.stringify([name, argument, state.sort, state.filters, { ...data, now: 0 }]);
    if (shown === state.shown && Date.now() - state.drawnAt < 10000) return;
    state.shown = shown;
    state.drawnAt = Date.now();
    const focused = document.activeElement && document.activeElement.id;
    $("toolbar").replaceChildren(...(view.toolbar ? view.toolbar(data) : []));
    $("content").replaceChildren(view.render(data));
    if (focused && $(focused)) $(focused).focus();
    $("content").dataset.view = name;
    $("content").dataset.drawnAt = String(performance.timeOrigin + performance.now());
  } catch (error) {
    if (generation !== state.generation) return;
    if (error.status === 401) { logout("That token no longer opens the console."); return; }
    $("problem").textContent = error.message;
  }
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => { await refresh(); schedule(); }, POLL_MS);
}

async function open() {
  try {
    state.session = await api("/session");
  } catch (error) {
    state.session = null;
    logout(error.status === 401 ? "Not a console token." : error.message);
    return;
  }
  $("login").hidden = true;
  $("view").hidden = false;
  $("nav").hidden = false;
  $("logout").hidden = false;
  $("who").hidden = false;
  $("who").textContent = `${state.session.user} (${state.session.role})`;
  if (!state.session.pools) document.querySelector('nav a[data-view="pools"]').hidden = true;
  await refresh();
  schedule();
}

function logout(message) {
  clearTimeout(state.timer);
  sessionStorage.removeItem("consoleToken");
  state.token = null;
  state.session = null;
  $("login").hidden = false;
  for (const id of ["view", "nav", "logout", "who"]) $(id).hidden = true;
  $("login-error").textContent = message || "";
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem("consoleToken", state.token);
    open();
  });
  $("logout").addEventListener("click", () => logout(""));
  window.addEventListener("hashchange", () => { state.sort = {}; refresh(); });
  if (state.token) open();
});
