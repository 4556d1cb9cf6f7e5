// kdelay console: a view of the JSON API under api/v1 (docs/console.md).
// No framework, no build step; the token lives in this tab only
// (sessionStorage) and goes out as a bearer token, never as a cookie.
"use strict";

const API = "api/v1";
const TOKEN_KEY = "kdelay-console-token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";
let cursor = "";
let shown = 0;
let levelsFilled = false;
let paged = false; // more than the first page shown: no auto-refresh

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

// call fetches the API; it resolves to the parsed body and rejects with
// an Error carrying the API's message.
async function call(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "omit", cache: "no-store" });
  } catch (e) {
    throw Object.assign(new Error("the console does not answer (" + e.message + ")"), { status: 0 });
  }
  let data = null;
  try { data = await resp.json(); } catch (_) { /* not JSON */ }
  if (!resp.ok) {
    const msg = (data && data.error) || resp.status + " " + resp.statusText;
    throw Object.assign(new Error(msg), { status: resp.status, data });
  }
  return data;
}

function toast(msg, isError) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = "toast" + (isError ? " error" : "");
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 4000);
}

function banner(msg) {
  const b = $("#banner");
  b.textContent = msg || "";
  b.hidden = !msg;
}

function fmtTime(s) {
  if (!s || s.startsWith("0001-")) return "-";
  const d = new Date(s);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function relative(s) {
  if (!s || s.startsWith("0001-")) return "";
  let ms = new Date(s).getTime() - Date.now();
  const past = ms < 0;
  ms = Math.abs(ms);
  let out;
  if (ms < 1000) out = ms + "ms";
  else if (ms < 60e3) out = Math.round(ms / 1e3) + "s";
  else if (ms < 3600e3) out = Math.floor(ms / 60e3) + "m" + String(Math.round((ms % 60e3) / 1e3)).padStart(2, "0") + "s";
  else if (ms < 86400e3) out = Math.floor(ms / 3600e3) + "h" + String(Math.round((ms % 3600e3) / 60e3)).padStart(2, "0") + "m";
  else out = (ms / 86400e3).toFixed(1) + "d";
  return past ? out + " ago" : "in " + out;
}

// ---- status, levels, relays ----
async function loadStatus() {
  let st;
  try {
    st = await call("GET", API + "/status");
  } catch (e) {
    st = e.data;
    if (!st) {
      health(false, "unreachable");
      banner(e.status === 401 || e.status === 403 ? e.message + " — enter the token above." : "The console does not answer: " + e.message);
      return;
    }
  }
  $("#where").textContent = `topic ${st.topic} · group ${st.group.name} · ${st.index.records} records indexed`;
  if (st.index.error) {
    const away = /unavailable|brokers/i.test(st.index.error);
    health(false, st.index.ready ? "brokers away" : (away ? "brokers away" : "indexing"));
    banner(away ? "Kafka does not answer: " + st.index.error + ". What is shown may be stale." : st.index.error);
  } else {
    health(true, "live");
    banner("");
  }
  const members = st.group.members || [];
  $("#relays").textContent = `${members.length} relay${members.length === 1 ? "" : "s"} · group ${st.group.state} · lag ${st.lag}`;
  $("#relays").title = members.map(m => `${m.client_id}@${m.host}: partitions ${m.partitions.join(",")}`).join("\n");
  const tb = $("#levels tbody");
  tb.replaceChildren(...st.levels.map(l => el("tr", {},
    el("td", {}, l.level), el("td", {}, l.delay),
    el("td", { class: "num" }, l.pending),
    el("td", {}, l.next_due ? el("span", { title: fmtTime(l.next_due) }, relative(l.next_due)) : "-"),
    el("td", { class: "num" }, l.lag))));
  if (!levelsFilled && st.levels.length) {
    const sel = $("#f-level");
    for (const l of st.levels) sel.append(el("option", { value: l.level }, `${l.level} (${l.delay})`));
    levelsFilled = true;
  }
  $("#dlq-topic").textContent = st.dlq_topic;
  $("#token").placeholder = st.writes === "disabled" ? "writes disabled on this console" : "bearer token for writes";
}

function health(ok, text) {
  const h = $("#health");
  h.textContent = text;
  h.className = "pill " + (ok ? "pill-ok" : "pill-bad");
}

// ---- due histogram ----
async function loadDue() {
  const [bucket, horizon] = $("#due-range").value.split(",");
  let h;
  try {
    h = await call("GET", `${API}/due?bucket=${bucket}&horizon=${horizon}`);
  } catch (e) {
    $("#due-summary").textContent = e.message;
    return;
  }
  const maxCount = Math.max(1, ...h.buckets.map(b => b.count));
  $("#due-chart").replaceChildren(...h.buckets.map(b => {
    const by = Object.entries(b.by_level).map(([l, n]) => `level ${l}: ${n}`).join(", ");
    return el("div", {
      class: "bar" + (b.count ? "" : " zero"),
      style: "", title: `${fmtTime(b.start)}: ${b.count}${by ? " (" + by + ")" : ""}`,
    });
  }));
  [...$("#due-chart").children].forEach((bar, i) => { bar.style.height = (100 * h.buckets[i].count / maxCount) + "%"; });
  if (h.buckets.length) {
    $("#due-first").textContent = fmtTime(h.buckets[0].start);
    $("#due-last").textContent = fmtTime(h.buckets[h.buckets.length - 1].start);
  }
  const total = h.buckets.reduce((s, b) => s + b.count, 0);
  $("#due-summary").textContent = `${total} in range · ${h.overdue} overdue · ${h.later} later · busiest bucket ${maxCount === 1 && total === 0 ? 0 : maxCount}`;
}

// ---- schedules ----
function filterQuery() {
  const f = new FormData($("#filter-form"));
  const q = new URLSearchParams();
  for (const [k, v] of f.entries()) {
    if (!v) continue;
    if (k === "due_from" || k === "due_to") q.set(k, new Date(v).toISOString());
    else q.set(k, v);
  }
  return q;
}

async function loadSchedules(append, auto) {
  const q = filterQuery();
  q.set("limit", "50");
  if (append && cursor) q.set("cursor", cursor);
  const tb = $("#schedules tbody");
  let page;
  try {
    page = await call("GET", `${API}/schedules?${q}`);
  } catch (e) {
    tb.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 9 }, e.message)));
    $("#more").hidden = true;
    return;
  }
  // A refresh in flight while a cancel was armed keeps the armed row.
  if (auto && document.querySelector("#schedules button.confirm, #schedules button:disabled")) return;
  const rows = page.schedules.map(scheduleRow);
  paged = append;
  if (append) {
    tb.append(...rows);
    shown += rows.length;
  } else {
    tb.replaceChildren(...rows);
    shown = rows.length;
  }
  if (!shown) tb.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 9 }, "no schedules match")));
  cursor = page.next;
  $("#more").hidden = !cursor;
  $("#schedules-count").textContent = shown + (cursor ? "+ shown" : " shown");
}

function scheduleRow(s) {
  const cancellable = s.state === "waiting" || s.state === "wheel" || s.state === "due";
  const btn = cancellable && s.id
    ? el("button", { class: "small ghost cancel", "data-cancel": s.id, title: "Cancel every record with this id" }, "Cancel")
    : "";
  return el("tr", { "data-id": s.id },
    el("td", { class: "mono" }, s.id || "-"),
    el("td", {}, s.target || "-"),
    el("td", { class: "mono" }, s.key || "-"),
    el("td", {}, el("div", {}, fmtTime(s.due_at)), el("div", { class: "rel" }, relative(s.due_at))),
    el("td", { class: "num" }, s.level),
    el("td", { class: "mono" }, `${s.partition} / ${s.offset}`),
    el("td", {}, el("span", { class: "badge st-" + s.state, title: s.error || (s.cancel_cutoff ? "cut-off " + fmtTime(s.cancel_cutoff) : "") }, s.state)),
    el("td", {}, s.location, s.location === "cascaded" ? el("div", { class: "rel" }, "written " + fmtTime(s.original_timestamp)) : ""),
    el("td", {}, btn));
}

// Cancel takes two clicks: the first arms the button, the second sends.
async function onCancelClick(btn) {
  const id = btn.getAttribute("data-cancel");
  if (!btn.classList.contains("confirm")) {
    btn.classList.add("confirm");
    btn.textContent = "Confirm cancel";
    setTimeout(() => { if (btn.isConnected && !btn.disabled) { btn.classList.remove("confirm"); btn.textContent = "Cancel"; } }, 5000);
    return;
  }
  btn.disabled = true;
  btn.textContent = "Cancelling…";
  try {
    const a = await call("DELETE", `${API}/schedules/${encodeURIComponent(id)}`);
    btn.textContent = "Cancelled";
    btn.setAttribute("data-cancelled", "true");
    toast(`Cancelled ${a.id}: ${a.pending} pending, cut-off ${fmtTime(a.cutoff)}, acknowledged ${fmtTime(a.acknowledged_at)}`);
    setTimeout(() => { loadSchedules(false); refresh(); }, 1500);
  } catch (e) {
    btn.disabled = false;
    btn.classList.remove("confirm");
    btn.textContent = "Cancel";
    toast("Not cancelled: " + e.message, true);
  }
}

// ---- dead letters ----
function dlqQuery() {
  const q = new URLSearchParams();
  const reason = $("#dlq-reason").value, target = $("#dlq-target").value;
  if (reason) q.set("reason", reason);
  if (target) q.set("target", target);
  return q;
}

async function loadDLQ() {
  const tb = $("#dlq tbody");
  try {
    const page = await call("GET", `${API}/dead-letters?${dlqQuery()}`);
    tb.replaceChildren(...page.dead_letters.map(d => el("tr", {},
      el("td", { class: "mono" }, `${d.partition} / ${d.offset}`),
      el("td", {}, fmtTime(d.timestamp)),
      el("td", { class: "mono" }, d.key || "-"),
      el("td", {}, d.target || "-"),
      el("td", { class: "mono" }, d.source || "-"),
      el("td", {}, d.error))));
    if (!page.dead_letters.length) tb.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 6 }, "no dead letters match")));
  } catch (e) {
    tb.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 6 }, e.message)));
  }
}

async function replay(dryRun) {
  const reason = $("#dlq-reason").value;
  try {
    const a = await call("POST", `${API}/dead-letters/replay`, { reason, dry_run: dryRun });
    toast(`${dryRun ? "Would replay" : "Replayed"} ${a.replayed} dead letter(s); ${a.unmatched} not matching, ${a.invalid} still invalid (group ${a.group})`);
    if (!dryRun) refresh();
  } catch (e) {
    toast("Replay failed: " + e.message, true);
  }
}

// ---- wiring ----
function refresh() {
  loadStatus();
  loadDue();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token").value = token;
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("#token").value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
    toast(token ? "Token set for this tab" : "Token cleared");
    refresh();
    loadSchedules(false);
  });
  $("#token-clear").addEventListener("click", () => {
    token = "";
    $("#token").value = "";
    sessionStorage.removeItem(TOKEN_KEY);
    toast("Token cleared");
  });
  $("#filter-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadSchedules(false); });
  $("#filter-form").addEventListener("reset", () => setTimeout(() => loadSchedules(false), 0));
  $("#more").addEventListener("click", () => loadSchedules(true));
  $("#schedules").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-cancel]");
    if (b) onCancelClick(b);
  });
  $("#due-range").addEventListener("change", loadDue);
  $("#dlq-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadDLQ(); });
  $("#dlq-dry").addEventListener("click", () => replay(true));
  $("#dlq-replay").addEventListener("click", () => replay(false));
  refresh();
  loadSchedules(false);
  loadDLQ();
  setInterval(() => {
    refresh();
    // The table follows too, unless more pages are open or a cancel is armed.
    if (!paged && !document.querySelector("#schedules button.confirm, #schedules button:disabled")) loadSchedules(false, true);
  }, 5000);
});
