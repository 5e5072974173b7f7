// The status page's script: reads the admin API every few seconds and draws pools, machines
// as a timeline by state, the jobs waiting and running, and the last hour's job waits.
// Everything shown is built with DOM calls (never HTML strings): machine ids and reasons come
// from provisioner scripts and are shown as text only.
"use strict";

const REFRESH_MS = 3000;
const TOKEN_KEY = "autoscaler-admin-token";
const STATES = ["requested", "creating", "booting", "injecting", "ready", "busy",
  "draining", "destroying", "gone", "failed", "stopping", "stopped", "starting"];
const ENDED = new Set(["gone", "failed"]);
const SVG_NS = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function replaceRows(table, rows, columns, emptyText) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    body.append(el("tr", {}, el("td", { colspan: columns, class: "empty" }, emptyText)));
  }
}

function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

function counts(map) {
  const parts = Object.entries(map || {}).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`);
  return parts.length ? parts.join(", ") : "none";
}

class Unauthorized extends Error {}

async function getJson(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { headers, cache: "no-store" });
  if (response.status === 401) throw new Unauthorized(path);
  if (!response.ok) {
    throw new Error(`${path} answered ${response.status}: ${(await response.text()).slice(0, 200)}`);
  }
  return response.json();
}

// ---- pools and jobs ------------------------------------------------------------------------

function provisionerText(p) {
  if (!p) return "static";
  if (p.state === "open") return `paused until ${clock(p.until)}: ${p.reason}`;
  if (p.state === "half_open") return `trying again: ${p.reason}`;
  return "ok";
}

function drawPools(status) {
  $("version").textContent = `version ${status.version}`;
  $("draining").hidden = !status.draining;
  const rows = status.pools.map((p) => {
    const refused = p.paused_by_operator ? "paused by an operator"
      : p.paused ? `GitLab refuses: ${p.paused}` : "yes";
    return el("tr", { "data-pool": p.name },
      el("td", {}, p.name), el("td", {}, p.intake),
      el("td", {}, p.target_wait_seconds == null ? "—" : duration(p.target_wait_seconds * 1000)),
      el("td", {}, counts(p.machines)),
      el("td", {}, counts(p.jobs)), el("td", {}, p.requests_waiting ?? 0),
      el("td", { class: p.provisioner && p.provisioner.state !== "closed" ? "warn-text" : "" },
        provisionerText(p.provisioner)),
      el("td", { class: refused === "yes" ? "" : "warn-text" }, refused));
  });
  replaceRows($("pools"), rows, 8, "no pools");
}

function drawJobs(jobs, now) {
  const waiting = jobs.filter((j) => j.phase === "queued")
    .sort((a, b) => a.accepted_at - b.accepted_at);
  const running = jobs.filter((j) => ["assigned", "running", "failing"].includes(j.phase));
  $("waiting-count").textContent = `(${waiting.length})`;
  $("running-count").textContent = `(${running.length})`;
  replaceRows($("waiting"), waiting.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, j.id), el("td", {}, j.pool), el("td", {}, duration(now - j.accepted_at)))),
  3, "no job waits for a machine");
  replaceRows($("running"), running.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, j.id), el("td", {}, j.pool),
    el("td", { class: j.phase === "failing" ? "bad-text" : "", title: j.reason }, j.phase),
    el("td", {}, j.machine ?? "–"), el("td", {}, duration(now - j.accepted_at)))),
  5, "no job runs");
  return waiting;
}

// ---- machines ------------------------------------------------------------------------------

const ROW = 22;
const LABEL = 260;
const WIDTH = 1100;
const AXIS = 24;

function drawLegend() {
  $("legend").replaceChildren(...STATES.map((s) => el("span", {},
    svg("svg", { viewBox: "0 0 10 10", "aria-hidden": "true" },
      svg("rect", { width: 10, height: 10, class: `s-${s}` })), s)));
}

// The machine's states as [from, to, state, reason] spans, up to `now`.
function spans(machine, now) {
  const steps = [...(machine.timeline || [])].sort((a, b) => a.at - b.at);
  if (steps.length === 0) steps.push({ at: machine.since, state: machine.state });
  const out = [];
  if (machine.created_at < steps[0].at) out.push([machine.created_at, steps[0].at, "requested"]);
  steps.forEach((step, i) => {
    const end = i + 1 < steps.length ? steps[i + 1].at : ENDED.has(step.state) ? step.at : now;
    out.push([step.at, end, step.state, step.reason]);
  });
  return out;
}

function timeAxis(chart, x, from, to, y) {
  chart.append(svg("line", { x1: x(from), x2: x(to), y1: y, y2: y, class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const t = from + ((to - from) * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    chart.append(svg("text", { x: x(t), y: y + 15, "text-anchor": anchor, class: "tick" },
      i === 4 ? "now" : clock(t)));
  }
}

function drawMachines(machines, now) {
  const live = machines.filter((m) => !ENDED.has(m.state)).length;
  $("machine-count").textContent = `(${live} live, ${machines.length - live} ended)`;
  const chart = $("timeline");
  const oldest = Math.min(now, ...machines.map((m) => m.created_at));
  // From the oldest machine, within the last hour, two minutes at least: a young stack is
  // drawn wide rather than as a sliver at the right edge.
  const from = Math.min(now - 2 * 60e3, Math.max(now - 60 * 60e3, oldest));
  const x = (t) => LABEL + ((Math.min(Math.max(t, from), now) - from) / (now - from)) * (WIDTH - LABEL - 10);
  const height = Math.max(1, machines.length) * ROW + AXIS + 6;
  chart.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
  chart.replaceChildren();
  if (machines.length === 0) {
    chart.append(svg("text", { x: 10, y: 16, class: "tick" }, "no machines"));
  }
  machines.forEach((m, i) => {
    const y = 4 + i * ROW;
    const row = svg("g", { class: ENDED.has(m.state) ? "gone-row" : "", "data-machine": m.id },
      svg("text", { x: 6, y: y + 14 }, `${m.id} · ${m.pool} · ${m.state}`,
        svg("title", {}, m.reason ? `${m.state}: ${m.reason}` : m.state)));
    for (const [start, end, state, reason] of spans(m, now)) {
      if (end < from) continue;
      const left = x(start);
      const width = Math.max(2, x(end) - left);
      row.append(svg("rect", { x: left, y: y + 2, width, height: ROW - 6, class: `s-${state}` },
        svg("title", {}, `${m.id}: ${state} from ${clock(start)}${reason ? ` (${reason})` : ""}`)));
    }
    chart.append(row);
  });
  timeAxis(chart, x, from, now, Math.max(1, machines.length) * ROW + 6);
}

// ---- job waits -----------------------------------------------------------------------------

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// The wait target the pools shown share (a demand-aware pool's target_wait), in ms; null when
// they have none or differ, as the chart mixes their jobs.
function sharedTarget(pools) {
  const targets = new Set(pools.map((p) => p.target_wait_seconds ?? null));
  const [only] = targets;
  return targets.size === 1 && only != null ? only * 1000 : null;
}

function drawWaits(recent, waiting, target) {
  const { since, now, waits } = recent;
  const current = waiting.map((j) => ({ job: j.id, pool: j.pool, waited_ms: now - j.accepted_at }));
  const sorted = waits.map((w) => w.waited_ms).sort((a, b) => a - b);
  const summary = sorted.length === 0 ? "No job started in the last hour."
    : `${sorted.length} jobs started in the last hour: median wait ${duration(quantile(sorted, 0.5))},`
      + ` 95th percentile ${duration(quantile(sorted, 0.95))}, longest ${duration(sorted[sorted.length - 1])}.`;
  const over = target == null ? "" : ` Wait target ${duration(target)} (dashed line):`
    + ` ${sorted.filter((ms) => ms > target).length} waited longer.`;
  const longest = Math.max(0, ...current.map((c) => c.waited_ms));
  $("wait-summary").textContent = summary + over + (current.length
    ? ` ${current.length} waiting now, the longest for ${duration(longest)} (rings at the right edge).` : "");
  const height = 220;
  const top = Math.max(10e3, ...sorted, longest, target ?? 0) * 1.1;
  const x = (t) => 50 + ((t - since) / (now - since)) * (WIDTH - 70);
  const y = (ms) => height - AXIS - (ms / top) * (height - AXIS - 12);
  const chart = $("wait-chart");
  chart.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
  chart.replaceChildren();
  for (const f of [0, 0.5, 1]) {
    chart.append(svg("line", { x1: 50, x2: WIDTH - 20, y1: y(top * f), y2: y(top * f), class: "axis" }),
      svg("text", { x: 44, y: y(top * f) + 4, "text-anchor": "end", class: "tick" }, duration(top * f)));
  }
  timeAxis(chart, x, since, now, height - AXIS);
  if (target != null) {
    chart.append(svg("line", { x1: 50, x2: WIDTH - 20, y1: y(target), y2: y(target), class: "target" }),
      svg("text", { x: WIDTH - 22, y: y(target) - 4, "text-anchor": "end", class: "target-label" },
        `target ${duration(target)}`));
  }
  for (const w of waits) {
    chart.append(svg("circle", { cx: x(w.started_at), cy: y(w.waited_ms), r: 4, class: "wait", "data-job": w.job },
      svg("title", {}, `job ${w.job} (${w.pool}) waited ${duration(w.waited_ms)}, started ${clock(w.started_at)}`)));
  }
  for (const c of current) {
    chart.append(svg("circle", { cx: x(now), cy: y(c.waited_ms), r: 5, class: "still-waiting" },
      svg("title", {}, `job ${c.job} (${c.pool}) has waited ${duration(c.waited_ms)} so far`)));
  }
}

// ---- refresh -------------------------------------------------------------------------------

let lastGood = null;
let timer = null;

function showProblem(text) {
  $("problem").hidden = !text;
  $("problem").textContent = text || "";
}

function schedule() {
  // The last refresh to end sets the one timer: refreshes started by hand never add a loop.
  clearTimeout(timer);
  timer = setTimeout(refresh, REFRESH_MS);
}

async function refresh() {
  try {
    const [status, machines, jobs, waits] =
      await Promise.all(["/status", "/machines", "/jobs", "/waits"].map(getJson));
    drawPools(status);
    drawMachines(machines, waits.now);
    drawWaits(waits, drawJobs(jobs, waits.now), sharedTarget(status.pools));
    lastGood = Date.now();
    $("refreshed").textContent = `updated ${clock(lastGood)}`;
    $("token-form").hidden = true;
    $("forget").hidden = !sessionStorage.getItem(TOKEN_KEY);
    showProblem(null);
  } catch (error) {
    if (error instanceof Unauthorized) {
      // No polling until a token is given: each try would only be refused again.
      const had = sessionStorage.getItem(TOKEN_KEY);
      showProblem(had ? "The admin API refused this token: paste the one of [admin] token_file."
        : "The admin API wants its token ([admin] token_file): paste it below.");
      $("token-form").hidden = false;
      $("token").focus();
      clearTimeout(timer);
      return;
    }
    const since = lastGood ? ` Showing the data of ${clock(lastGood)}.` : "";
    showProblem(`Cannot read the admin API (${error.message}).${since} Trying again every ${REFRESH_MS / 1000} s.`);
  }
  schedule();
}

function start() {
  drawLegend();
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    refresh();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  refresh();
}

start();
