// Starquake dashboard: a read-only view of the broker, refreshed every two seconds. Views are
// URL hash routes:
//   #/                                   every tenant, namespace and topic
//   #/tenant/{tenant}                    one tenant
//   #/namespace/{tenant}/{namespace}     one namespace
//   #/topic/{domain}/{tenant}/{namespace}/{topic}   one topic: publishers, subscriptions,
//                                        consumers; a partitioned topic's partitions
// The overview is one request per refresh (/dashboard/api/overview, answered from the broker's
// live state); a topic is one request (its stats, or its partitioned stats). Requests carry the
// operator's credentials when given (the "Sign in" form). Every field is optional: a missing or
// non-numeric value shows as "–".
"use strict";

(function () {
  const {
    DASH, h, svg, isNum, fmtInt, fmtRate, fmtBytes, fmtByteRate, fmtText,
    loadAuth, saveAuth, HttpError, getJSON, record, chart,
  } = window.StarquakeDashboard;
  const REFRESH_MS = 2000;
  // Key_Shared hash spaces: 0..65535 (sticky and auto-split ranges) or 31-bit (consistent hashing)
  const HASH_SPACES = [65536, 2 ** 31, 2 ** 32];
  const PALETTE = [
    "#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6",
    "#06b6d4", "#ec4899", "#84cc16", "#f97316", "#6366f1",
  ];
  const RATE_LINES = [
    { field: "rateIn", label: "in", color: "#3b82f6" },
    { field: "rateOut", label: "out", color: "#10b981" },
  ];
  const BACKLOG_LINES = [{ field: "backlog", label: "backlog", color: "#f59e0b" }];

  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const statusEl = document.getElementById("status");
  const filterEl = document.getElementById("filter");
  const authButton = document.getElementById("auth-button");
  const authPanel = document.getElementById("auth-panel");
  const authForm = document.getElementById("auth-form");
  const authNote = document.getElementById("auth-note");

  let timer = null;
  let generation = 0;
  let refreshes = 0;
  let shown = null; // {key, route, data} of what is on screen
  let partitionsOf = new Map(); // topic route key -> its number of partitions (0: none)

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

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  // --- loading --------------------------------------------------------------------------------

  async function loadOverview(route) {
    const query = new URLSearchParams();
    if (route.tenant) query.set("tenant", route.tenant);
    if (route.namespace) query.set("namespace", route.namespace);
    const qs = query.toString();
    const data = await getJSON(`/dashboard/api/overview${qs ? `?${qs}` : ""}`);
    const totals = data.totals || {};
    data.history = record(route.key, {
      rateIn: totals.msgRateIn, rateOut: totals.msgRateOut, backlog: totals.backlog,
    });
    return data;
  }

  async function loadTopic(route) {
    let partitions = partitionsOf.get(route.key);
    if (partitions === undefined) {
      const meta = await getJSON(`${topicPath(route.topic)}/partitions`);
      partitions = meta && isNum(meta.partitions) ? meta.partitions : 0;
      partitionsOf.set(route.key, partitions);
    }
    const path = partitions > 0
      ? `${topicPath(route.topic)}/partitioned-stats?perPartition=true`
      : `${topicPath(route.topic)}/stats`;
    const stats = await getJSON(path);
    const history = record(route.key, {
      rateIn: stats.msgRateIn, rateOut: stats.msgRateOut, backlog: backlogOf(stats),
    });
    return { stats, partitions, history };
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
    if (route.kind === "topic") {
      const partition = /^(.*)-partition-\d+$/.exec(route.topic.local);
      if (partition) {
        const parent = { ...route.topic, local: partition[1] };
        items.push(h("a", { href: topicHref(parent), text: partition[1] }));
      }
      items.push(h("span", { text: route.topic.local }));
    }
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

  function matches(topic) {
    const q = filterEl.value.trim().toLowerCase();
    return !q || topic.full.toLowerCase().includes(q);
  }

  function charts(history) {
    return h("section", { class: "charts", "aria-label": "History" },
      chart("rates", "Messages per second", RATE_LINES, history, fmtRate),
      chart("backlog", "Backlog (messages)", BACKLOG_LINES, history, fmtInt));
  }

  function topicRow(row) {
    const t = parseTopic(row.name);
    const loaded = row.loaded > 0;
    const num = (cls, text, title) => h("td", { class: `num ${cls}`, text, title });
    const value = (v, fmt) => (loaded ? fmt(v) : DASH);
    const backlog = loaded ? row.backlog : null;
    return h("tr", { "data-topic": t.full, "data-partitions": row.partitions || 0 },
      h("td", { class: "topic-name" },
        h("a", { href: topicHref(t) }, t.local),
        row.partitions > 0
          ? h("span", { class: "badge partitions", text: plural(row.partitions, "partition") }) : null,
        t.domain === "non-persistent" ? h("span", { class: "badge np", text: "non-persistent" }) : null,
        loaded ? null : h("span", { class: "badge idle", title: "No client has used it since the broker started", text: "not loaded" })),
      num("producers", value(row.producers, fmtInt)),
      num("subscriptions", value(row.subscriptions, fmtInt)),
      num("rate-in", value(row.msgRateIn, fmtRate)),
      num("rate-out", value(row.msgRateOut, fmtRate)),
      num("throughput-in", value(row.msgThroughputIn, fmtByteRate)),
      num("throughput-out", value(row.msgThroughputOut, fmtByteRate)),
      h("td", { class: `num backlog${backlog > 0 ? " hot" : ""}`, text: value(backlog, fmtInt) }),
      num("storage", value(row.storageSize, fmtBytes)));
  }

  function topicTable(rows) {
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
      h("tbody", {}, rows.map(topicRow)));
  }

  function clusterSection(view) {
    if (!view) return null;
    if (view.error) {
      return section("Cluster", null, h("p", { class: "error", text: `The cluster's store did not answer: ${view.error}` }));
    }
    const brokers = asArray(view.brokers);
    const bundles = asArray(view.bundles);
    const brokerRows = brokers.map((b) => {
      const marks = [b.id === view.leader ? "leader" : "", b.id === view.self ? "this broker" : ""].filter(Boolean);
      return h("tr", { "data-broker": b.id },
        h("td", {}, h("span", { text: b.id }), marks.length ? h("span", { class: "muted", text: ` (${marks.join(", ")})` }) : null),
        h("td", { text: b.serviceUrl || "" }),
        h("td", { class: "num", text: fmtInt(b.topics) }),
        h("td", { class: "num", text: fmtInt(b.bundles) }),
        h("td", { class: "num", text: fmtRate(b.msgRateIn) }),
        h("td", { class: "num", text: fmtRate(b.msgRateOut) }),
        h("td", { class: "num", text: `${Number(b.cpuPercent || 0).toFixed(0)} %` }));
    });
    const bundleRows = bundles.map((b) =>
      h("tr", { "data-bundle": `${b.namespace}/${b.bundle}` },
        h("td", { text: b.namespace }), h("td", { text: b.bundle }), h("td", { text: b.owner })));
    return section("Cluster", plural(brokers.length, "broker"),
      h("table", { class: "grid brokers" },
        h("thead", {}, h("tr", {},
          h("th", { text: "Broker" }), h("th", { text: "Service URL" }),
          h("th", { class: "num", text: "Topics" }), h("th", { class: "num", text: "Bundles" }),
          h("th", { class: "num", text: "In msg/s" }), h("th", { class: "num", text: "Out msg/s" }),
          h("th", { class: "num", text: "CPU" }))),
        h("tbody", {}, brokerRows)),
      bundles.length
        ? h("table", { class: "grid bundles" },
          h("thead", {}, h("tr", {},
            h("th", { text: "Namespace" }), h("th", { text: "Bundle" }), h("th", { text: "Owner" }))),
          h("tbody", {}, bundleRows))
        : h("p", { class: "muted", text: "No bundle is owned yet (bundles are taken at their first lookup)." }),
      h("p", { class: "muted", text: "Topic figures below are this broker's: the topics it serves." }));
  }

  function renderOverview(route, data) {
    const groups = asArray(data.tenants);
    const totals = data.totals || {};
    const namespaces = groups.flatMap((g) => asArray(g.namespaces));
    const topicCount = namespaces.reduce((n, ns) => n + asArray(ns.topics).length, 0);
    const summary = h("section", { class: "cards", "aria-label": "Totals" },
      card("Tenants", fmtInt(groups.length)),
      card("Namespaces", fmtInt(namespaces.length)),
      card("Topics", fmtInt(topicCount)),
      card("In msg/s", fmtRate(totals.msgRateIn)),
      card("Out msg/s", fmtRate(totals.msgRateOut)),
      card("Backlog", fmtInt(totals.backlog), "total-backlog"),
      card("Storage", fmtBytes(totals.storageSize)));
    const cluster = clusterSection(data.clusterView);
    if (!groups.length) {
      const who = data.role ? `role ${data.role}` : "you";
      return [summary, cluster, h("p", { class: "muted empty", text: `Nothing here that ${who} may read.` })];
    }
    const sections = groups.map((group) =>
      h("section", { class: "tenant", "data-tenant": group.name },
        h("h2", {},
          h("a", { href: `#/tenant/${enc(group.name)}`, text: group.name }),
          h("span", { class: "count", text: plural(asArray(group.namespaces).length, "namespace") })),
        asArray(group.namespaces).length === 0 ? h("p", { class: "muted", text: "No namespaces." }) : null,
        asArray(group.namespaces).map((ns) => {
          const [tenant, local] = String(ns.name).split("/");
          const rows = asArray(ns.topics).filter((r) => parseTopic(r.name));
          const visible = rows.filter((r) => matches(parseTopic(r.name)));
          return h("div", { class: "namespace panel", "data-namespace": ns.name },
            h("h3", {},
              h("a", { href: `#/namespace/${enc(tenant)}/${enc(local || "")}`, text: ns.name }),
              h("span", { class: "count", text: plural(rows.length, "topic") })),
            visible.length
              ? topicTable(visible)
              : h("p", { class: "muted", text: rows.length ? "No topic matches the filter." : "No topics." }));
        })));
    return [summary, cluster, charts(data.history), ...sections];
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

  function partitionsTable(route, data) {
    const parts = data.stats.partitions && typeof data.stats.partitions === "object"
      ? data.stats.partitions : {};
    const rows = [];
    for (let i = 0; i < data.partitions; i += 1) {
      const t = { ...route.topic, local: `${route.topic.local}-partition-${i}` };
      t.full = `${t.domain}://${t.tenant}/${t.namespace}/${t.local}`;
      const s = parts[t.full];
      const num = (cls, text) => h("td", { class: `num ${cls}`, text });
      const backlog = backlogOf(s);
      rows.push(h("tr", { "data-partition": i, "data-topic": t.full },
        h("td", { class: "topic-name" }, h("a", { href: topicHref(t), text: t.local }),
          s ? null : h("span", { class: "badge idle", text: "not loaded" })),
        num("producers", s ? fmtInt(asArray(s.publishers).length) : DASH),
        num("subscriptions", s ? fmtInt(subscriptionsOf(s).length) : DASH),
        num("rate-in", fmtRate(s && s.msgRateIn)),
        num("rate-out", fmtRate(s && s.msgRateOut)),
        h("td", { class: `num backlog${backlog > 0 ? " hot" : ""}`, text: fmtInt(backlog) }),
        num("storage", fmtBytes(s && s.storageSize))));
    }
    return h("table", { class: "grid partitions" },
      h("thead", {}, h("tr", {},
        h("th", { text: "Partition" }),
        h("th", { class: "num", text: "Producers" }),
        h("th", { class: "num", text: "Subs" }),
        h("th", { class: "num", text: "In msg/s" }),
        h("th", { class: "num", text: "Out msg/s" }),
        h("th", { class: "num", text: "Backlog" }),
        h("th", { class: "num", text: "Storage" }))),
      h("tbody", {}, rows));
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
        data.partitions > 0
          ? h("span", { class: "badge partitions", text: `partitioned \u00b7 ${plural(data.partitions, "partition")}` })
          : null,
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
      charts(data.history),
      data.partitions > 0 ? section("Partitions", data.partitions, partitionsTable(route, data)) : null,
      section("Producers", publishers.length, publishersTable(publishers)),
      section("Subscriptions", subs.length,
        subs.length
          ? subs.map(([name, sub]) => subscriptionPanel(name, sub))
          : h("p", { class: "muted", text: "No subscriptions." })),
    ];
  }

  // --- credentials ----------------------------------------------------------------------------

  function showAuthScheme() {
    const basic = authForm.elements.scheme.value === "basic";
    authForm.querySelector(".auth-bearer").hidden = basic;
    authForm.querySelector(".auth-basic").hidden = !basic;
  }

  function openAuth(note) {
    authNote.textContent = note || "";
    authPanel.hidden = false;
    const auth = loadAuth();
    authForm.elements.scheme.value = auth ? auth.scheme : "bearer";
    showAuthScheme();
  }

  // `needed`: whether the broker asks for credentials (false: hide the button unless some are
  // stored; null: not known yet).
  function renderAuthButton(role, needed) {
    const auth = loadAuth();
    authButton.textContent = auth ? (role ? `Signed in as ${role}` : "Signed in") : "Sign in";
    authButton.classList.toggle("signed-in", Boolean(auth));
    authButton.hidden = needed === false && !auth;
  }

  authButton.addEventListener("click", () => {
    if (authPanel.hidden) openAuth("");
    else authPanel.hidden = true;
  });
  authForm.elements.scheme.forEach((radio) => radio.addEventListener("change", showAuthScheme));
  authForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const f = authForm.elements;
    const basic = f.scheme.value === "basic";
    const secret = basic ? `${f.user.value}:${f.password.value}` : f.token.value.trim();
    if (basic ? !f.user.value : !secret) {
      authNote.textContent = basic ? "Enter a user name." : "Paste a token.";
      return;
    }
    saveAuth({ scheme: basic ? "basic" : "bearer", secret });
    authForm.reset();
    authPanel.hidden = true;
    shown = null;
    partitionsOf = new Map();
    refresh();
  });
  document.getElementById("auth-forget").addEventListener("click", () => {
    saveAuth(null);
    authForm.reset();
    authPanel.hidden = true;
    shown = null;
    refresh();
  });

  // --- refresh loop ---------------------------------------------------------------------------

  function render(route, data) {
    const nodes = route.kind === "topic" ? renderTopic(route, data) : renderOverview(route, data);
    main.replaceChildren(...nodes.filter(Boolean));
    main.setAttribute("data-view", route.kind);
  }

  function setStatus(ok, text) {
    statusEl.className = `status ${ok ? "ok" : "down"}`;
    statusEl.textContent = text;
  }

  function showError(route, err, message) {
    shown = null;
    const status = err instanceof HttpError ? err.status : 0;
    let text = message;
    if (status === 401) {
      text = loadAuth()
        ? `The broker refused the credentials (${message}).`
        : "The broker needs credentials: sign in with a token (or a user and password).";
      openAuth(text);
    } else if (status === 404 && route.kind === "topic") {
      text = `Topic ${route.topic.full} not found (${message}).`;
    }
    main.replaceChildren(h("p", { class: "error", "data-error": String(status || "true"), text }));
    setStatus(false, status === 401 ? "sign in needed" : "error");
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
        if (route.kind === "overview") renderAuthButton(data.role, data.authentication);
        refreshes += 1;
        main.setAttribute("data-refreshes", String(refreshes));
        setStatus(true, `live \u00b7 ${new Date().toLocaleTimeString("en-GB")}`);
      }
    } catch (err) {
      if (gen !== generation) return;
      const message = err && err.message ? err.message : String(err);
      if (shown && shown.key === route.key && !(err instanceof HttpError && err.status === 401)) {
        setStatus(false, `stale \u00b7 ${message}`);
      } else {
        showError(route, err, message);
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
  renderAuthButton(null, null);
  refresh();
})();
