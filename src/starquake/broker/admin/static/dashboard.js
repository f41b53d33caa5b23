// Starquake dashboard: a read-only view of the broker, drawn from its admin REST API (same
// origin) and refreshed every two seconds. Views are URL hash routes:
//   #/                                   every tenant, namespace and topic
//   #/tenant/{tenant}                    one tenant
//   #/namespace/{tenant}/{namespace}     one namespace
//   #/topic/{domain}/{tenant}/{namespace}/{topic}   one topic: publishers, subscriptions, consumers
// Every field is optional: a missing or non-numeric value shows as "–".
"use strict";

(function () {
  const REFRESH_MS = 2000;
  // Key_Shared hash spaces: 0..65535 (sticky and auto-split ranges) or 31-bit (consistent hashing)
  const HASH_SPACES = [65536, 2 ** 31, 2 ** 32];
  const MAX_PARALLEL = 8; // stats requests in flight at once
  const DASH = "\u2013";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const PALETTE = [
    "#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6",
    "#06b6d4", "#ec4899", "#84cc16", "#f97316", "#6366f1",
  ];

  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const statusEl = document.getElementById("status");
  const filterEl = document.getElementById("filter");

  let timer = null;
  let generation = 0;
  let shown = null; // {key, route, data} of what is on screen

  // --- DOM helpers ----------------------------------------------------------------------------

  function build(node, attrs, children) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function h(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }

  // --- formatting -----------------------------------------------------------------------------

  function isNum(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function fmtInt(v) {
    return isNum(v) ? Math.round(v).toLocaleString("en-US") : DASH;
  }

  function fmtRate(v) {
    if (!isNum(v)) return DASH;
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function fmtBytes(v) {
    if (!isNum(v)) return DASH;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let n = v;
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return i === 0 ? `${Math.round(n)} B` : `${n.toFixed(n >= 100 ? 0 : 1)} ${units[i]}`;
  }

  function fmtByteRate(v) {
    return isNum(v) ? `${fmtBytes(v)}/s` : DASH;
  }

  function fmtText(v) {
    return v === null || v === undefined || v === "" ? DASH : String(v);
  }

  // --- the admin API --------------------------------------------------------------------------

  class HttpError extends Error {
    constructor(status, path, reason) {
      super(reason ? `HTTP ${status}: ${reason}` : `HTTP ${status} for ${path}`);
      this.status = status;
    }
  }

  async function getJSON(path) {
    const resp = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" } });
    if (!resp.ok) {
      let reason = "";
      try {
        const body = await resp.json();
        reason = body && typeof body.reason === "string" ? body.reason : "";
      } catch (_) {
        // not JSON: the status says enough
      }
      throw new HttpError(resp.status, path, reason);
    }
    return resp.json();
  }

  const enc = encodeURIComponent;

  function parseTopic(full) {
    const m = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(String(full));
    if (!m) return null;
    return { full: m[0], domain: m[1], tenant: m[2], namespace: m[3], local: m[4] };
  }

  function topicPath(t) {
    return `/admin/v2/${t.domain}/${enc(t.tenant)}/${enc(t.namespace)}/${enc(t.local)}`;
  }

  function topicHref(t) {
    return `#/topic/${t.domain}/${enc(t.tenant)}/${enc(t.namespace)}/${enc(t.local)}`;
  }

  function asArray(v) {
    return Array.isArray(v) ? v : [];
  }

  function subscriptionsOf(stats) {
    const subs = stats && stats.subscriptions;
    if (!subs || typeof subs !== "object") return [];
    return Object.keys(subs).sort().map((name) => [name, subs[name] || {}]);
  }

  // Messages not yet acknowledged, over all subscriptions (null when stats are missing).
  function backlogOf(stats) {
    if (!stats) return null;
    let total = 0;
    for (const [, sub] of subscriptionsOf(stats)) {
      if (isNum(sub.msgBacklog)) total += sub.msgBacklog;
    }
    return total;
  }

  function byText(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  async function mapLimit(items, limit, fn) {
    const out = new Array(items.length);
    let next = 0;
    async function worker() {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]);
      }
    }
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    return out;
  }

  async function loadOverview(route) {
    let tenants = route.tenant ? [route.tenant] : asArray(await getJSON("/admin/v2/tenants"));
    tenants = tenants.map(String).sort();
    const groups = await Promise.all(
      tenants.map(async (tenant) => {
        if (route.namespace) return { tenant, namespaces: [`${tenant}/${route.namespace}`] };
        try {
          const names = asArray(await getJSON(`/admin/v2/namespaces/${enc(tenant)}`));
          return { tenant, namespaces: names.map(String).sort() };
        } catch (err) {
          return { tenant, namespaces: [], error: err.message };
        }
      }),
    );
    const namespaces = [];
    for (const group of groups) {
      group.entries = [];
      for (const name of group.namespaces) {
        const ns = { name, topics: [], errors: [] };
        group.entries.push(ns);
        namespaces.push(ns);
      }
    }
    await Promise.all(
      namespaces.map(async (ns) => {
        const [tenant, local] = ns.name.split("/");
        const names = new Set();
        for (const domain of ["persistent", "non-persistent"]) {
          try {
            const path = `/admin/v2/${domain}/${enc(tenant)}/${enc(local)}`;
            for (const name of asArray(await getJSON(path))) names.add(String(name));
          } catch (err) {
            ns.errors.push(`${domain} topics: ${err.message}`);
          }
        }
        const parsed = [...names].map(parseTopic).filter(Boolean);
        parsed.sort((a, b) => byText(a.local, b.local) || byText(a.domain, b.domain));
        ns.topics = parsed.map((t) => ({ topic: t }));
      }),
    );
    const rows = namespaces.flatMap((ns) => ns.topics);
    await mapLimit(rows, MAX_PARALLEL, async (row) => {
      try {
        row.stats = await getJSON(`${topicPath(row.topic)}/stats`);
      } catch (err) {
        row.stats = null;
        row.error = err.message;
      }
    });
    return { groups };
  }

  async function loadTopic(route) {
    return { stats: await getJSON(`${topicPath(route.topic)}/stats`) };
  }

  // --- routes ---------------------------------------------------------------------------------

  function parseRoute(hash) {
    const parts = hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "");
    let decoded;
    try {
      decoded = parts.map(decodeURIComponent);
    } catch (_) {
      decoded = parts;
    }
    const [kind, ...rest] = decoded;
    if (kind === "topic" && rest.length >= 4 && /^(non-)?persistent$/.test(rest[0])) {
      const full = `${rest[0]}://${rest[1]}/${rest[2]}/${rest.slice(3).join("/")}`;
      const topic = parseTopic(full);
      if (topic) return { kind: "topic", topic, key: `topic:${full}` };
    }
    if (kind === "namespace" && rest.length === 2) {
      return { kind: "overview", tenant: rest[0], namespace: rest[1], key: `ns:${rest[0]}/${rest[1]}` };
    }
    if (kind === "tenant" && rest.length === 1) {
      return { kind: "overview", tenant: rest[0], key: `tenant:${rest[0]}` };
    }
    return { kind: "overview", key: "all" };
  }

  function renderCrumbs(route) {
    const items = [h("a", { href: "#/", text: "Overview" })];
    const tenant = route.kind === "topic" ? route.topic.tenant : route.tenant;
    const namespace = route.kind === "topic" ? route.topic.namespace : route.namespace;
    if (tenant) items.push(h("a", { href: `#/tenant/${enc(tenant)}`, text: tenant }));
    if (tenant && namespace) {
      items.push(h("a", { href: `#/namespace/${enc(tenant)}/${enc(namespace)}`, text: namespace }));
    }
    if (route.kind === "topic") items.push(h("span", { text: route.topic.local }));
    const out = [];
    items.forEach((item, i) => {
      if (i > 0) out.push(h("span", { class: "sep", "aria-hidden": "true", text: "/" }));
      out.push(item);
    });
    crumbs.replaceChildren(...out);
  }

  // --- overview -------------------------------------------------------------------------------

  function card(label, value, extra) {
    return h("div", { class: `card ${extra || ""}`.trim() },
      h("div", { class: "card-value", text: value }),
      h("div", { class: "card-label", text: label }));
  }

  function sum(values) {
    let total = 0;
    let any = false;
    for (const v of values) {
      if (isNum(v)) {
        total += v;
        any = true;
      }
    }
    return any ? total : null;
  }

  function matches(topic) {
    const q = filterEl.value.trim().toLowerCase();
    return !q || topic.full.toLowerCase().includes(q);
  }

  function topicRow(row) {
    const t = row.topic;
    const s = row.stats;
    const backlog = backlogOf(s);
    const partition = /^(.*)(-partition-\d+)$/.exec(t.local);
    const name = partition
      ? [partition[1], h("span", { class: "partition", text: partition[2] })]
      : [t.local];
    const num = (cls, text, title) => h("td", { class: `num ${cls}`, text, title });
    return h("tr", { "data-topic": t.full },
      h("td", { class: "topic-name" },
        h("a", { href: topicHref(t) }, name),
        t.domain === "non-persistent" ? h("span", { class: "badge np", text: "non-persistent" }) : null,
        row.error ? h("span", { class: "badge warn", title: row.error, text: "no stats" }) : null),
      num("producers", s ? fmtInt(asArray(s.publishers).length) : DASH),
      num("subscriptions", s ? fmtInt(subscriptionsOf(s).length) : DASH),
      num("rate-in", fmtRate(s && s.msgRateIn)),
      num("rate-out", fmtRate(s && s.msgRateOut)),
      num("throughput-in", fmtByteRate(s && s.msgThroughputIn)),
      num("throughput-out", fmtByteRate(s && s.msgThroughputOut)),
      h("td", { class: `num backlog${backlog > 0 ? " hot" : ""}`, text: fmtInt(backlog) }),
      num("storage", fmtBytes(s && s.storageSize)));
  }

  function topicTable(topics) {
    return h("table", { class: "grid topics" },
      h("thead", {}, h("tr", {},
        h("th", { text: "Topic" }),
        h("th", { class: "num", text: "Producers" }),
        h("th", { class: "num", text: "Subs" }),
        h("th", { class: "num", text: "In msg/s" }),
        h("th", { class: "num", text: "Out msg/s" }),
        h("th", { class: "num", text: "In" }),
        h("th", { class: "num", text: "Out" }),
        h("th", { class: "num", title: "Unacknowledged messages over all subscriptions", text: "Backlog" }),
        h("th", { class: "num", text: "Storage" }))),
      h("tbody", {}, topics.map(topicRow)));
  }

  function renderOverview(route, data) {
    const all = data.groups.flatMap((g) => g.entries.flatMap((ns) => ns.topics));
    const stats = all.map((r) => r.stats).filter(Boolean);
    const nsCount = data.groups.reduce((n, g) => n + g.entries.length, 0);
    const summary = h("section", { class: "cards", "aria-label": "Totals" },
      card("Tenants", fmtInt(data.groups.length)),
      card("Namespaces", fmtInt(nsCount)),
      card("Topics", fmtInt(all.length)),
      card("In msg/s", fmtRate(sum(stats.map((s) => s.msgRateIn)))),
      card("Out msg/s", fmtRate(sum(stats.map((s) => s.msgRateOut)))),
      card("Backlog", fmtInt(sum(stats.map(backlogOf))), "total-backlog"),
      card("Storage", fmtBytes(sum(stats.map((s) => s.storageSize)))));
    const sections = data.groups.map((group) =>
      h("section", { class: "tenant", "data-tenant": group.tenant },
        h("h2", {},
          h("a", { href: `#/tenant/${enc(group.tenant)}`, text: group.tenant }),
          h("span", { class: "count", text: plural(group.entries.length, "namespace") })),
        group.error ? h("p", { class: "error", text: group.error }) : null,
        !group.error && group.entries.length === 0
          ? h("p", { class: "muted", text: "No namespaces." }) : null,
        group.entries.map((ns) => {
          const [tenant, local] = ns.name.split("/");
          const visible = ns.topics.filter((r) => matches(r.topic));
          return h("div", { class: "namespace panel", "data-namespace": ns.name },
            h("h3", {},
              h("a", { href: `#/namespace/${enc(tenant)}/${enc(local || "")}`, text: ns.name }),
              h("span", { class: "count", text: plural(ns.topics.length, "topic") })),
            ns.errors.map((e) => h("p", { class: "error", text: e })),
            visible.length
              ? topicTable(visible)
              : h("p", { class: "muted", text: ns.topics.length ? "No topic matches the filter." : "No topics." }));
        })));
    return [summary, ...sections];
  }

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  // --- topic view -----------------------------------------------------------------------------

  function parseRange(text) {
    const m = /^\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]\s*$/.exec(String(text));
    if (!m) return null;
    const start = Number(m[1]);
    const end = Number(m[2]);
    if (end < start) return null;
    return { start, end, text: `[${start}, ${end}]` };
  }

  // The smallest hash space that holds every range: 65536 unless a range ends above 65535.
  function hashSpaceOf(ranges) {
    const top = ranges.reduce((n, r) => Math.max(n, r.end), 0);
    return HASH_SPACES.find((size) => top < size) || top + 1;
  }

  function coverage(ranges, space) {
    return ranges.reduce((n, r) => n + (r.end - r.start + 1), 0) / space;
  }

  function pct(ranges, space) {
    return `${(coverage(ranges, space) * 100).toFixed(1)}%`;
  }

  // A horizontal bar over the hash space 0..space-1 with one rectangle per range.
  function hashBar(segments, space, height, label) {
    const bar = svg("svg", {
      class: "hash-bar", viewBox: `0 0 1000 ${height}`, preserveAspectRatio: "none",
      width: "100%", height, role: "img", "aria-label": label,
    }, svg("rect", { class: "hash-bg", x: 0, y: 0, width: 1000, height }));
    for (const seg of segments) {
      const x = (seg.start / space) * 1000;
      const w = Math.max(((seg.end - seg.start + 1) / space) * 1000, 0.5);
      bar.append(svg("rect", {
        class: "hash-range", x: x.toFixed(3), y: 0, width: w.toFixed(3), height,
        fill: seg.color, "data-consumer": seg.consumer, "data-range": seg.text,
      }, svg("title", { text: `${seg.consumer} ${seg.text}` })));
    }
    return bar;
  }

  function hashScale(space) {
    const ticks = [0, space / 4, space / 2, (3 * space) / 4, space - 1];
    return h("div", { class: "hash-scale", "aria-hidden": "true" },
      ticks.map((t) => h("span", { text: fmtInt(t) })));
  }

  function section(title, count, ...body) {
    return h("section", { class: "panel" },
      h("h2", {}, title, count === null ? null : h("span", { class: "count", text: String(count) })),
      ...body);
  }

  function publishersTable(publishers) {
    if (!publishers.length) return h("p", { class: "muted", text: "No producers connected." });
    return h("table", { class: "grid publishers" },
      h("thead", {}, h("tr", {},
        h("th", { text: "Producer" }),
        h("th", { text: "Access mode" }),
        h("th", { class: "num", text: "In msg/s" }),
        h("th", { class: "num", text: "In" }),
        h("th", { text: "Address" }),
        h("th", { text: "Connected since" }))),
      h("tbody", {}, publishers.map((p) => h("tr", { "data-producer": fmtText(p.producerName) },
        h("td", { class: "mono", text: fmtText(p.producerName) }),
        h("td", { text: fmtText(p.accessMode) }),
        h("td", { class: "num", text: fmtRate(p.msgRateIn) }),
        h("td", { class: "num", text: fmtByteRate(p.msgThroughputIn) }),
        h("td", { class: "mono", text: fmtText(p.address) }),
        h("td", { text: fmtText(p.connectedSince) })))));
  }

  function subscriptionPanel(name, sub) {
    const type = fmtText(sub.type);
    const keyShared = /^key_?shared$/i.test(String(sub.type || ""));
    const consumers = asArray(sub.consumers).map((c, i) => {
      const consumer = c || {};
      const cname = fmtText(consumer.consumerName);
      const ranges = asArray(consumer.keyHashRanges).map(parseRange).filter(Boolean);
      return { c: consumer, name: cname, ranges, color: PALETTE[i % PALETTE.length],
        hasRanges: Array.isArray(consumer.keyHashRanges) };
    });
    const showRanges = keyShared || consumers.some((c) => c.hasRanges);
    const space = hashSpaceOf(consumers.flatMap((c) => c.ranges));
    const metric = (label, value, cls, hot) => h("div", { class: `metric ${cls}` },
      h("span", { class: `metric-value${hot ? " hot" : ""}`, text: value }),
      h("span", { class: "metric-label", text: label }));
    const head = h("div", { class: "sub-head" },
      h("h3", { class: "mono", text: name }),
      h("span", { class: `badge type-${type.toLowerCase()}`, text: type }),
      sub.isDurable === false ? h("span", { class: "badge np", text: "non-durable" }) : null,
      h("div", { class: "metrics" },
        metric("backlog", fmtInt(sub.msgBacklog), "backlog", sub.msgBacklog > 0),
        metric("unacked", fmtInt(sub.unackedMessages), "unacked"),
        metric("out msg/s", fmtRate(sub.msgRateOut), "rate-out"),
        metric("out", fmtByteRate(sub.msgThroughputOut), "throughput-out"),
        isNum(sub.msgDelayed) && sub.msgDelayed > 0 ? metric("delayed", fmtInt(sub.msgDelayed), "delayed") : null));
    let hashMap = null;
    if (showRanges && consumers.length) {
      const segments = consumers.flatMap((c) =>
        c.ranges.map((r) => ({ ...r, consumer: c.name, color: c.color })));
      hashMap = h("div", { class: "hash-map" },
        h("div", { class: "hash-title", text: `Key hash ranges (0\u2013${fmtInt(space - 1)})` }),
        hashBar(segments, space, 28, `Key hash ranges of subscription ${name}`),
        hashScale(space),
        h("ul", { class: "legend" }, consumers.map((c) => h("li", {},
          h("span", { class: "swatch", style: `background:${c.color}` }),
          h("span", { class: "mono", text: c.name }),
          h("span", { class: "muted", text: pct(c.ranges, space) })))));
    }
    const table = consumers.length
      ? h("table", { class: "grid consumers" },
        h("thead", {}, h("tr", {},
          h("th", { text: "Consumer" }),
          h("th", { class: "num", text: "Permits" }),
          h("th", { class: "num", text: "Unacked" }),
          h("th", { class: "num", text: "Out msg/s" }),
          h("th", { text: "Address" }),
          showRanges ? h("th", { class: "ranges-col", text: "Hash ranges" }) : null)),
        h("tbody", {}, consumers.map((c) => h("tr", { "data-consumer": c.name },
          h("td", { class: "mono" },
            h("span", { class: "swatch", style: showRanges ? `background:${c.color}` : "display:none" }),
            c.name,
            c.c.blockedConsumerOnUnackedMsgs ? h("span", { class: "badge warn", text: "blocked" }) : null),
          h("td", { class: "num permits", text: fmtInt(c.c.availablePermits) }),
          h("td", { class: "num unacked", text: fmtInt(c.c.unackedMessages) }),
          h("td", { class: "num rate-out", text: fmtRate(c.c.msgRateOut) }),
          h("td", { class: "mono", text: fmtText(c.c.address) }),
          showRanges ? h("td", { class: "ranges-col" },
            c.ranges.length
              ? [hashBar(c.ranges.map((r) => ({ ...r, consumer: c.name, color: c.color })), space,
                12, `Key hash ranges of ${c.name}`),
              h("div", { class: "range-text mono", text: rangeSummary(c.ranges, space) })]
              : h("span", { class: "muted", text: DASH })) : null))))
      : h("p", { class: "muted", text: "No consumers connected." });
    return h("div", { class: "subscription", "data-subscription": name }, head, hashMap, table);
  }

  function rangeSummary(ranges, space) {
    const first = ranges.slice(0, 2).map((r) => r.text).join(" ");
    const more = ranges.length > 2 ? ` +${ranges.length - 2} more` : "";
    return `${pct(ranges, space)} \u00b7 ${first}${more}`;
  }

  function renderTopic(route, data) {
    const s = data.stats || {};
    const t = route.topic;
    const subs = subscriptionsOf(s);
    const publishers = asArray(s.publishers);
    return [
      h("div", { class: "title" },
        h("h1", { class: "mono", text: t.local }),
        h("span", { class: `badge ${t.domain === "persistent" ? "" : "np"}`.trim(), text: t.domain }),
        h("div", { class: "muted mono full-name", text: t.full })),
      h("section", { class: "cards", "aria-label": "Topic totals" },
        card("In msg/s", fmtRate(s.msgRateIn)),
        card("Out msg/s", fmtRate(s.msgRateOut)),
        card("In", fmtByteRate(s.msgThroughputIn)),
        card("Out", fmtByteRate(s.msgThroughputOut)),
        card("Messages in", fmtInt(s.msgInCounter)),
        card("Backlog", fmtInt(backlogOf(s)), "total-backlog"),
        card("Backlog size", fmtBytes(s.backlogSize)),
        card("Storage", fmtBytes(s.storageSize))),
      section("Producers", publishers.length, publishersTable(publishers)),
      section("Subscriptions", subs.length,
        subs.length
          ? subs.map(([name, sub]) => subscriptionPanel(name, sub))
          : h("p", { class: "muted", text: "No subscriptions." })),
    ];
  }

  // --- refresh loop ---------------------------------------------------------------------------

  function render(route, data) {
    const nodes = route.kind === "topic" ? renderTopic(route, data) : renderOverview(route, data);
    main.replaceChildren(...nodes);
    main.setAttribute("data-view", route.kind);
  }

  function setStatus(ok, text) {
    statusEl.className = `status ${ok ? "ok" : "down"}`;
    statusEl.textContent = text;
  }

  async function refresh() {
    const gen = ++generation;
    clearTimeout(timer);
    const route = parseRoute(location.hash);
    renderCrumbs(route);
    filterEl.hidden = route.kind !== "overview";
    if (!shown || shown.key !== route.key) main.setAttribute("aria-busy", "true");
    try {
      if (!document.hidden || !shown || shown.key !== route.key) {
        const data = route.kind === "topic" ? await loadTopic(route) : await loadOverview(route);
        if (gen !== generation) return;
        shown = { key: route.key, route, data };
        render(route, data);
        setStatus(true, `live \u00b7 ${new Date().toLocaleTimeString("en-GB")}`);
      }
    } catch (err) {
      if (gen !== generation) return;
      const message = err && err.message ? err.message : String(err);
      if (shown && shown.key === route.key) {
        setStatus(false, `stale \u00b7 ${message}`);
      } else {
        shown = null;
        const missing = err instanceof HttpError && err.status === 404 && route.kind === "topic";
        main.replaceChildren(h("p", { class: "error", "data-error": "true",
          text: missing ? `Topic ${route.topic.full} not found (${message}).` : message }));
        setStatus(false, "error");
      }
    } finally {
      if (gen === generation) {
        main.removeAttribute("aria-busy");
        timer = setTimeout(refresh, REFRESH_MS);
      }
    }
  }

  window.addEventListener("hashchange", () => {
    window.scrollTo(0, 0);
    refresh();
  });
  filterEl.addEventListener("input", () => {
    if (shown && shown.route.kind === "overview") render(shown.route, shown.data);
  });
  refresh();
})();
