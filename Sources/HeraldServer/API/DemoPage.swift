/// The browser demo page (`GET /demo`, served only with `"api": {"demo": true}`): the web twin of
/// an app in the foreground. It reads `app` and `token` (a client token) from the URL fragment
/// (`/demo#app=com.example.app&token=…`; a fragment never reaches the server or a Referer), opens
/// an `EventSource` on `/v1/stream` with acks (`ack=1`), and shows each `notification` event as
/// an on-page toast (`<div class="toast" data-id="<notification id>">`) and, once the user
/// allowed it, as a Web Notification. It acknowledges what it showed as the SDK does: cumulatively,
/// `POST /v1/stream/ack?app=A` with `{"id": <last event id>}` and the client token, one request at
/// a time, so its notifications are `delivered` when the page has them (and a frozen tab's take
/// their fallback). It shows the connection state (`#state`, `data-state` = `connecting`, `live`,
/// `reconnecting` or `closed`), the last event id (`#last-event-id`) and the last one the server
/// took the ack of (`#acked`).
///
/// It registers its service worker (``serviceWorker``, `GET /demo/sw.js`, scope `/demo`) and
/// shows its state (`#worker`, `data-scope` once `navigator.serviceWorker.ready`). When the app
/// has a `webpush` route (`GET /v1/webpush/{app}/public-key` answers), the button "Also notify
/// me when this tab is closed" (`#subscribe`) calls `PushManager.subscribe` with that key and
/// registers the subscription with the page's client token (`POST /v1/stream/subscription`),
/// which links it to this page's stream device (`local-first`: an open tab gets the stream, a
/// closed one the Web Push). Each id the page showed from the stream goes into the Cache
/// `herald-demo-shown`, so the worker drops a Web Push of a notification the page already showed.
///
/// Served with a Content-Security-Policy that allows only this page's own inline script and
/// style (a fresh nonce per response), connections to its own origin and a worker from it.
enum DemoPage {
    /// The page with a fresh CSP nonce.
    static func response() -> HTTPResponse {
        var generator = SystemRandomNumberGenerator()
        let nonce = (0..<2).map { _ in String(generator.next() as UInt64, radix: 36) }.joined()
        let csp = "default-src 'none'; script-src 'nonce-\(nonce)'; style-src 'nonce-\(nonce)'; connect-src 'self'; "
            + "worker-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        return HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", csp),
            ("Cache-Control", "no-store"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
        ], body: Array(html.replacing("NONCE", with: nonce).utf8))
    }

    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Herald demo</title>
<style nonce="NONCE">
body { font: 16px/1.4 system-ui, sans-serif; margin: 2rem auto; max-width: 40rem; padding: 0 1rem; color: #222; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dd { margin: 0; font-family: ui-monospace, monospace; }
[data-state="live"] { color: #07632b; } [data-state="reconnecting"], [data-state="connecting"] { color: #8a5a00; }
[data-state="closed"] { color: #a4161a; }
.toast { border: 1px solid #ccc; border-left: 4px solid #1565c0; border-radius: 4px; padding: .5rem .75rem; margin: .5rem 0; }
.toast strong { display: block; }
.toast p { margin: .25rem 0 0; }
</style>
</head>
<body>
<h1>Herald demo</h1>
<p>Notifications for this browser arrive over a live stream and show below.</p>
<dl>
  <dt>App</dt><dd id="app">-</dd>
  <dt>Connection</dt><dd><output id="state" data-state="connecting">connecting</output></dd>
  <dt>Last event id</dt><dd id="last-event-id">-</dd>
  <dt>Acknowledged</dt><dd id="acked">-</dd>
  <dt>Web Notifications</dt><dd><span id="permission">-</span> <button id="ask" type="button" hidden>Allow</button></dd>
  <dt>Service worker</dt><dd><output id="worker">-</output></dd>
  <dt>Web Push</dt><dd><output id="push">-</output> <button id="subscribe" type="button" hidden>Also notify me when this tab is closed</button></dd>
</dl>
<h2>Notifications</h2>
<div id="toasts" role="log" aria-live="polite" aria-label="Notifications"></div>
<script nonce="NONCE">
"use strict";
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const app = params.get("app"), token = params.get("token");

function setState(state, text) {
  $("state").dataset.state = state;
  $("state").textContent = text || state;
}

function showPermission() {
  const supported = "Notification" in window;
  $("permission").textContent = supported ? Notification.permission : "not supported";
  $("ask").hidden = !supported || Notification.permission !== "default";
}

$("ask").addEventListener("click", () => Notification.requestPermission().then(showPermission));

// An alert is a string or {title, subtitle, body}.
function texts(alert) {
  if (typeof alert === "string") return { title: "", body: alert };
  if (alert && typeof alert === "object") {
    return { title: String(alert.title || ""), body: [alert.subtitle, alert.body].filter(Boolean).join("\n") };
  }
  return { title: "", body: "" };
}

// The ids this page showed, for the service worker: it drops a Web Push of one of them.
function remember(id) {
  if (!id || !("caches" in window)) return Promise.resolve();
  return caches.open("herald-demo-shown")
    .then((c) => c.put(new Request("/demo/shown/" + encodeURIComponent(id)), new Response("")))
    .catch(() => {});
}

function toast(n) {
  remember(n.id);
  const t = texts(n.alert);
  const div = document.createElement("div");
  div.className = "toast";
  div.dataset.id = n.id;
  const title = document.createElement("strong");
  title.textContent = t.title || n.app || "Notification";
  const body = document.createElement("p");
  body.textContent = t.body || (n.data ? JSON.stringify(n.data) : "");
  div.append(title, body);
  $("toasts").prepend(div);
  while ($("toasts").children.length > 50) $("toasts").lastChild.remove();
  if ("Notification" in window && Notification.permission === "granted") {
    new Notification(title.textContent, { body: body.textContent, tag: n.id });
  }
}

// Why a refused stream was refused: the API's JSON error (EventSource cannot see it).
function explain(url) {
  const abort = new AbortController();
  fetch(url, { signal: abort.signal, cache: "no-store" })
    .then((r) => { if (r.ok) { abort.abort(); return null; } return r.json(); })
    .then((j) => { if (j && j.error) setState("closed", "closed: " + j.error.code + ": " + j.error.message); })
    .catch(() => {});
}

// Acknowledges what the page has read: cumulatively (the last event id), one request at a
// time; a failed one is tried again a second later (a newer id replaces it meanwhile).
const acks = { read: 0, acked: 0, busy: false };
function ack() {
  if (acks.busy || acks.read <= acks.acked) return;
  acks.busy = true;
  const id = acks.read;
  fetch("/v1/stream/ack?app=" + encodeURIComponent(app), {
    method: "POST", cache: "no-store",
    headers: { "Authorization": "Bearer " + token, "Content-Type": "application/json" },
    body: JSON.stringify({ id: id }),
  }).then((r) => r.status === 204, () => false).then((ok) => {
    acks.busy = false;
    if (ok) { acks.acked = Math.max(acks.acked, id); $("acked").textContent = String(acks.acked); ack(); }
    else setTimeout(ack, 1000);
  });
}

function connect() {
  if (!app || !token) {
    setState("closed", "closed: open this page as /demo#app=APP&token=CLIENT_TOKEN");
    return;
  }
  $("app").textContent = app;
  const url = "/v1/stream?app=" + encodeURIComponent(app) + "&ack=1&access_token=" + encodeURIComponent(token);
  const source = new EventSource(url);
  source.onopen = () => setState("live");
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) { setState("closed"); explain(url); } else setState("reconnecting");
  };
  source.addEventListener("notification", (e) => {
    $("last-event-id").textContent = e.lastEventId || "-";
    try { toast(JSON.parse(e.data)); } catch (err) { console.error("bad notification event", err, e.data); }
    const id = Number(e.lastEventId);
    if (Number.isSafeInteger(id) && id > acks.read) { acks.read = id; ack(); }
  });
}

function base64URLBytes(text) {
  const b = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

// The service worker shows Web Push notifications while this tab is closed.
function registerWorker() {
  if (!("serviceWorker" in navigator)) { $("worker").textContent = "not supported"; return; }
  navigator.serviceWorker.register("/demo/sw.js", { scope: "/demo" })
    .catch((err) => { $("worker").textContent = "failed: " + err.message; });
  navigator.serviceWorker.ready.then((registration) => {
    $("worker").dataset.scope = registration.scope;
    $("worker").textContent = "ready (" + registration.scope + ")";
    if (app && token) offerPush(registration);
  });
}

// The button shows when the app has a webpush route (its public key answers).
let serverKey = null;
function offerPush(registration) {
  if (!("PushManager" in window)) { $("push").textContent = "not supported"; return; }
  fetch("/v1/webpush/" + encodeURIComponent(app) + "/public-key", { cache: "no-store" })
    .then((r) => r.ok ? r.json() : null)
    .then((j) => {
      if (!j || !j.public_key) { $("push").textContent = "the app has no webpush route"; return; }
      serverKey = j.public_key;
      return registration.pushManager.getSubscription().then((existing) => {
        $("push").textContent = existing ? "subscribed" : "off";
        $("subscribe").hidden = false;
      });
    })
    .catch((err) => { $("push").textContent = "failed: " + err.message; });
}

function subscribePush() {
  $("push").textContent = "subscribing";
  navigator.serviceWorker.ready
    .then((registration) => registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: base64URLBytes(serverKey) }))
    .then((subscription) => fetch("/v1/stream/subscription?app=" + encodeURIComponent(app), {
      method: "POST", cache: "no-store",
      headers: { "Authorization": "Bearer " + token, "Content-Type": "application/json" },
      body: JSON.stringify({ subscription: subscription.toJSON() }),
    }))
    .then((r) => r.ok ? null : r.json().then((j) => { throw new Error(j.error ? j.error.code + ": " + j.error.message : "HTTP " + r.status); }))
    .then(() => { $("push").textContent = "subscribed"; showPermission(); })
    .catch((err) => { $("push").textContent = "failed: " + err.message; });
}
$("subscribe").addEventListener("click", subscribePush);

// A new token pasted into the address bar changes only the fragment: start over with it.
window.addEventListener("hashchange", () => location.reload());
showPermission();
connect();
registerWorker();
</script>
</body>
</html>
"""#

    /// `GET /demo/sw.js`: the demo page's service worker, served with `Service-Worker-Allowed:
    /// /demo` (its scope is the page, one level above the script's own folder).
    static func serviceWorkerResponse() -> HTTPResponse {
        HTTPResponse(status: 200, headers: [
            ("Content-Type", "text/javascript; charset=utf-8"),
            ("Service-Worker-Allowed", "/demo"),
            ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"),
        ], body: Array(serviceWorker.utf8))
    }

    /// The service worker. A `push` event carries Herald's Web Push JSON (`{id, app, title,
    /// body, icon, image, badge, tag, data, created_at}`): it shows it as a notification (tag:
    /// the `tag`, else the id), unless the page already showed that id from its stream (the
    /// Cache `herald-demo-shown`), and remembers what it showed. A click focuses an open page, or
    /// opens the demo.
    static let serviceWorker = #"""
"use strict";
const SHOWN = "herald-demo-shown";
const key = (id) => new Request("/demo/shown/" + encodeURIComponent(id));

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

async function shownBefore(id) {
  const cache = await caches.open(SHOWN);
  return (await cache.match(key(id))) !== undefined;
}

async function show(n) {
  if (n.id && await shownBefore(n.id)) return;  // the open tab showed it from its stream
  const options = { body: n.body || "", tag: n.tag || n.id, data: { id: n.id, app: n.app, data: n.data, created_at: n.created_at } };
  for (const name of ["icon", "image", "badge"]) if (n[name]) options[name] = n[name];
  await self.registration.showNotification(n.title || n.app || "Notification", options);
  if (n.id) await (await caches.open(SHOWN)).put(key(n.id), new Response(""));
}

self.addEventListener("push", (event) => {
  let n = {};
  try { n = event.data ? event.data.json() : {}; } catch (err) { n = { body: event.data ? event.data.text() : "" }; }
  event.waitUntil(show(n));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((pages) => {
    const page = pages.find((p) => new URL(p.url).pathname === "/demo");
    return page ? page.focus() : self.clients.openWindow("/demo");
  }));
});
"""#
}
