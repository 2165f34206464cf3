// The llmproxy inspector: plain DOM, no framework, no build step. Everything the server sends is
// shown with textContent, never parsed as HTML: prompts and model output are untrusted text.
"use strict";

const API = "inspect/api/";
const WINDOW_MS = 5 * 60 * 1000; // the overview's rates cover the last five minutes (less, just opened)
const POLL_MS = 5000;
const KEEP = 500; // requests the page keeps, as the server does

const requests = new Map(); // seq -> summary
const samples = []; // [{at, models: {name: counts}}], the overview's history for rates
let choices = null;
let pollTimer = null;

// --- helpers ---------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function getJSON(path, options = {}) {
  const response = await fetch(API + path, { credentials: "same-origin", ...options });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
  return body;
}

const ms = (seconds) => (seconds === null || seconds === undefined ? "–" : `${Math.round(seconds * 1000)} ms`);
const clock = (epoch) => new Date(epoch * 1000).toLocaleTimeString();
const statusClass = (status) => (status < 300 ? "ok" : status < 500 ? "warn" : "bad");

// --- views -----------------------------------------------------------------------------------

function show(view) {
  for (const id of ["overview-view", "requests-view", "request-view"]) {
    document.getElementById(id).hidden = id !== view;
  }
  document.getElementById("nav-overview").classList.toggle("active", view === "overview-view");
  document.getElementById("nav-requests").classList.toggle("active", view !== "overview-view");
}

function route() {
  clearTimeout(pollTimer);
  const hash = location.hash.replace(/^#/, "");
  const match = hash.match(/^request\/(\d+)$/);
  if (match) {
    show("request-view");
    openRequest(Number(match[1]));
  } else if (hash === "requests") {
    show("requests-view");
    renderRequests();
  } else {
    show("overview-view");
    pollOverview();
  }
}

// --- overview --------------------------------------------------------------------------------

async function pollOverview() {
  try {
    const overview = await getJSON("overview");
    choices = overview.choices;
    setCapture(overview.capture);
    samples.push({ at: Date.now(), models: Object.fromEntries(overview.models.map((m) => [m.model, m.counts])) });
    while (samples.length > 2 && Date.now() - samples[1].at > WINDOW_MS) samples.shift();
    renderOverview(overview);
  } catch (error) {
    document.getElementById("overview-note").textContent = `Could not read the overview: ${error.message}`;
  }
  if (!document.getElementById("overview-view").hidden) pollTimer = setTimeout(pollOverview, POLL_MS);
}

function setCapture(capture) {
  document.getElementById("capture-state").textContent = capture
    ? "capturing request bodies"
    : "metadata only (start the server with --capture to see bodies)";
}

function renderOverview(overview) {
  const first = samples[0];
  const minutes = Math.max((Date.now() - first.at) / 60000, 1 / 60);
  const rows = overview.models.map((model) => {
    const now = model.counts;
    const then = first.models[model.model] || now;
    const delta = (key) => (now[key] || 0) - (then[key] || 0);
    const ttfbCount = delta("ttfb_count");
    const ttfb = ttfbCount > 0 ? delta("ttfb_sum") / ttfbCount : (now.ttfb_count ? now.ttfb_sum / now.ttfb_count : null);
    const health = model.up === null ? "–" : model.up ? "up" : "down";
    return el("tr", { "data-model": model.model },
      el("td", {}, el("strong", {}, model.model)),
      el("td", {}, model.backend, model.endpoint ? el("div", { class: "note" }, model.endpoint) : null,
        model.on_demand ? el("div", { class: model.on_demand.state === "failed" ? "bad" : "note",
          title: (model.on_demand.log || []).join("\n") || model.on_demand.error || "" },
          `${model.on_demand.state} · ${Math.round(model.on_demand.memory_bytes / 1048576)} MiB · ${model.on_demand.loads} loads`) : null,
        ...(model.members || []).map((member) => el("div", { class: `member ${member.state === "up" ? "" : "bad"}` },
          `${member.name}: ${member.state}`, el("span", { class: "note" },
            ` ${member.endpoint || member.backend || ""}, ${member.in_flight ?? 0} running${member.detail ? `; ${member.detail}` : ""}`)))),
      el("td", {}, `${model.wrapper} · ${model.syntax} · ${model.grammar}`),
      el("td", { class: model.up === false ? "bad" : "ok", title: model.health || "" }, health),
      el("td", {}, `${model.running}/${model.max_running} · ${model.queued}/${model.max_queue}`),
      el("td", {}, `${now.requests} (${(delta("requests") / minutes).toFixed(1)}/min)`,
        now.retries ? el("div", { class: "note" }, `${now.retries} second chance${now.retries === 1 ? "" : "s"}`) : null),
      el("td", { class: now.errors ? "bad" : "" }, `${now.errors} (${(delta("errors") / minutes).toFixed(1)}/min)`),
      el("td", {}, ms(ttfb)),
      el("td", {}, model.fallbacks.length ? `→ ${model.fallbacks.join(", ")}` : "none",
        now.fallbacks ? el("div", { class: "note" }, `fell back ${now.fallbacks}×`) : null));
  });
  document.querySelector("#models tbody").replaceChildren(...rows);
  const span = Math.round((Date.now() - first.at) / 1000);
  document.getElementById("overview-note").textContent =
    `Totals since the server started (from /metrics); rates over the last ${span < 60 ? `${span} s` : `${Math.round(span / 60)} min`} ` +
    `while this page was open. Keeping ${overview.kept} of at most ${overview.max_kept} requests, ` +
    `${(overview.kept_bytes / 1048576).toFixed(1)} of ${overview.max_bytes / 1048576} MiB of bodies.`;
}

// --- live requests ---------------------------------------------------------------------------

function listen() {
  const state = document.getElementById("live-state");
  const events = new EventSource(API + "events");
  events.onopen = () => { state.textContent = "live"; state.className = "note ok"; };
  events.onerror = () => { state.textContent = "reconnecting…"; state.className = "note warn"; };
  events.addEventListener("request", (event) => {
    const summary = JSON.parse(event.data);
    requests.set(summary.seq, summary);
    while (requests.size > KEEP) requests.delete(requests.keys().next().value);
    if (!document.getElementById("requests-view").hidden) renderRequests();
  });
}

function renderRequests() {
  const rows = [...requests.values()].reverse().map((r) => el("tr", {
    class: "request", "data-seq": r.seq, onclick: () => { location.hash = `request/${r.seq}`; },
  },
    el("td", {}, r.seq),
    el("td", {}, clock(r.ended)),
    el("td", { class: "mono" }, r.id),
    el("td", {}, r.endpoint + (r.stream ? " (stream)" : "")),
    el("td", {}, r.model || "–"),
    el("td", { class: statusClass(r.status) }, r.status + (r.error ? ` ${r.error}` : "")),
    el("td", {}, ms(r.seconds)),
    el("td", {}, ms(r.first_token_seconds)),
    el("td", {}, `${r.prompt_tokens}+${r.completion_tokens}`),
    el("td", { class: r.attempts > 1 ? "warn" : "" }, r.attempts),
    el("td", {}, r.repairs.join(", ") || "–"),
    el("td", {}, r.fallbacks.map((f) => `${f.model} (${f.error})`).join(", ") || "–")));
  document.querySelector("#requests tbody").replaceChildren(...rows);
  document.getElementById("requests-note").hidden = rows.length > 0;
}

// --- one request, every step -----------------------------------------------------------------

// ``text`` with each of ``markers`` (the wrapper's special tokens and stops) shown as a marker.
function marked(text, markers) {
  const pre = el("pre");
  const found = markers.filter((m) => m && text.includes(m));
  if (!found.length) { pre.textContent = text; return pre; }
  const escaped = found.sort((a, b) => b.length - a.length).map((m) => m.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  for (const part of text.split(new RegExp(`(${escaped.join("|")})`))) {
    pre.append(found.includes(part) ? el("mark", { class: "marker" }, part) : document.createTextNode(part));
  }
  return pre;
}

function block(title, className, content, open = true) {
  const body = typeof content === "string" ? el("pre", {}, content) : content;
  return el("details", { class: `step ${className}`, ...(open ? { open: "" } : {}) }, el("summary", {}, title), body);
}

function verdict(detail, attempt, index) {
  const last = index === detail.steps.attempts.length - 1;
  if (attempt.rejected) {
    return el("div", { class: "verdict bad" }, `Not accepted: ${attempt.rejected} `,
      el("span", { class: "note" }, last ? "" : "The model was told so in a new user turn (see the next attempt's prompt) and tried again."));
  }
  if (!last) return null;
  if (detail.steps.failure) return el("div", { class: "verdict bad" }, `Failed: ${detail.steps.failure}`);
  const repairs = detail.repairs.length ? `after repairs: ${detail.repairs.join(", ")}` : "as written, no repair needed";
  return el("div", { class: "verdict ok" }, `Accepted ${repairs}.`);
}

function column(detail, heading) {
  const facts = [`${detail.endpoint}`, `model ${detail.model || "–"}`, `backend ${detail.backend || "–"}`,
    `wrapper ${detail.wrapper || "–"}`, `grammar ${detail.grammar || "none"}`, `status ${detail.status}`,
    `${ms(detail.seconds)}`, `first token ${ms(detail.first_token_seconds)}`,
    ...(detail.model_wait_seconds ? [`waited ${ms(detail.model_wait_seconds)} for its model to load`] : []),
    `tokens ${detail.prompt_tokens}+${detail.completion_tokens}`, `attempts ${detail.attempts}`];
  const parts = [el("h3", {}, heading), el("p", { class: "facts" }, facts.join(" · "))];
  if (detail.changes) parts.push(el("p", { class: "note" }, `changed: ${JSON.stringify(detail.changes)}`));
  if (detail.fallbacks.length) {
    parts.push(el("p", { class: "warn" }, `fell back from ${detail.fallbacks.map((f) => `${f.model} (${f.error})`).join(", ")}`));
  }
  const steps = detail.steps;
  if (!steps) {
    parts.push(el("p", { class: "note" }, detail.dropped_bytes
      ? `Its bodies (${detail.dropped_bytes} bytes) were larger than the capture buffer, so only its metadata is kept.`
      : "Only metadata: the server does not capture bodies. Start it with --capture (config: capture = true) to see the prompt, grammar and output."));
    if (detail.error) parts.push(el("p", { class: "bad" }, `error: ${detail.error}`));
    return el("div", { class: "column" }, ...parts);
  }
  parts.push(block("Client request", "step-request", steps.request || "", false));
  steps.attempts.forEach((attempt, index) => {
    const attemptParts = [
      block("Prompt (wrapper markers highlighted)", "step-prompt", marked(attempt.prompt, steps.markers)),
      el("p", { class: "step-stops" }, "Stops: ", ...attempt.stops.map((s) => el("code", {}, JSON.stringify(s)))),
      attempt.grammar || !attempt.json_schema
        ? block(attempt.grammar ? "Grammar (GBNF)" : "Grammar: none sent", "step-grammar", attempt.grammar || "", false)
        : block("JSON schema (the backend's constraint)", "step-grammar", attempt.json_schema, false),
      attempt.lazy_grammar
        ? block(`Lazy grammar, from ${attempt.triggers.map((t) => JSON.stringify(t)).join(" or ")} on (to backends that take one)`,
          "step-lazy-grammar", attempt.lazy_grammar, false)
        : null,
      block("Raw output", "step-raw", attempt.raw === null ? "(none: the backend did not answer)" : attempt.raw),
      verdict(detail, attempt, index),
    ];
    parts.push(el("section", { class: "attempt" }, el("h4", {}, `Attempt ${index + 1}`), ...attemptParts));
  });
  if (!steps.attempts.length && steps.failure) parts.push(el("div", { class: "verdict bad" }, `Failed: ${steps.failure}`));
  parts.push(el("p", { class: "step-repair" }, `Repairs: ${detail.repairs.join(", ") || "none"}`));
  parts.push(block("Response sent", "step-response", steps.response || steps.failure || "(none)", false));
  return el("div", { class: "column" }, ...parts);
}

async function openRequest(seq) {
  const columns = document.getElementById("columns");
  columns.replaceChildren(el("p", { class: "note" }, "loading…"));
  let detail;
  try {
    detail = await getJSON(`requests/${seq}`);
  } catch (error) {
    columns.replaceChildren(el("p", { class: "bad" }, error.message));
    return;
  }
  document.getElementById("request-title").textContent = `Request #${detail.seq} · ${detail.id}`;
  columns.replaceChildren(column(detail, detail.rerun_of ? `Run again (of #${detail.rerun_of})` : "Original"));
  await setupRerun(detail);
}

function options(select, names, current) {
  select.replaceChildren(el("option", { value: "" }, `as before${current ? ` (${current})` : ""}`),
    ...names.map((name) => el("option", { value: name }, name)));
}

async function setupRerun(detail) {
  const form = document.getElementById("rerun-form");
  form.hidden = !detail.can_rerun;
  if (!detail.can_rerun) return;
  if (!choices) choices = (await getJSON("overview")).choices;
  options(document.getElementById("rerun-wrapper"), choices.wrappers, detail.wrapper);
  options(document.getElementById("rerun-syntax"), choices.syntaxes, null);
  options(document.getElementById("rerun-grammar"), choices.grammars, detail.grammar);
  form.onsubmit = async (event) => {
    event.preventDefault();
    const state = document.getElementById("rerun-state");
    const value = (id) => document.getElementById(id).value;
    let settings = {};
    try {
      settings = value("rerun-settings").trim() ? JSON.parse(value("rerun-settings")) : {};
    } catch (error) {
      state.textContent = `settings: not JSON (${error.message})`;
      return;
    }
    state.textContent = "running…";
    try {
      const rerun = await getJSON(`requests/${detail.seq}/rerun`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ wrapper: value("rerun-wrapper"), syntax: value("rerun-syntax"), grammar: value("rerun-grammar"), settings }),
      });
      state.textContent = `done: #${rerun.seq}, status ${rerun.status}`;
      document.getElementById("columns").replaceChildren(column(detail, "Original"), column(rerun, `Run again (#${rerun.seq})`));
    } catch (error) {
      state.textContent = `failed: ${error.message}`;
    }
  };
}

// --- start -----------------------------------------------------------------------------------

window.addEventListener("hashchange", route);
listen();
route();
