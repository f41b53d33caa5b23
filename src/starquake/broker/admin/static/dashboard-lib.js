// Starquake dashboard, shared pieces: DOM helpers, formatting, requests with the operator's
// credentials, and the short history charts. Loaded before dashboard.js; exposes
// window.StarquakeDashboard. No external library: the page works without internet access.
"use strict";

(function () {
  const DASH = "\u2013";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const AUTH_KEY = "starquake.dashboard.auth";
  const HISTORY_MS = 5 * 60 * 1000; // charts keep five minutes of samples
  const MAX_HISTORIES = 32; // views remembered at once

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

  // --- credentials ----------------------------------------------------------------------------
  // The operator's token (or user and password) lives in sessionStorage: this tab only, gone
  // when it closes, sent only to this origin.

  function loadAuth() {
    try {
      const value = JSON.parse(sessionStorage.getItem(AUTH_KEY) || "null");
      if (value && (value.scheme === "bearer" || value.scheme === "basic")
        && typeof value.secret === "string" && value.secret !== "") {
        return value;
      }
    } catch (_) {
      // unreadable: as if none
    }
    return null;
  }

  function saveAuth(auth) {
    if (auth) sessionStorage.setItem(AUTH_KEY, JSON.stringify(auth));
    else sessionStorage.removeItem(AUTH_KEY);
  }

  function base64(text) {
    let binary = "";
    for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
    return btoa(binary);
  }

  // The Authorization header of the stored credentials (null: none).
  function authorization() {
    const auth = loadAuth();
    if (!auth) return null;
    return auth.scheme === "bearer" ? `Bearer ${auth.secret}` : `Basic ${base64(auth.secret)}`;
  }

  class HttpError extends Error {
    constructor(status, path, reason) {
      super(reason ? `HTTP ${status}: ${reason}` : `HTTP ${status} for ${path}`);
      this.status = status;
    }
  }

  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    const credentials = authorization();
    if (credentials) headers.Authorization = credentials;
    const resp = await fetch(path, { cache: "no-store", credentials: "same-origin", headers });
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

  // --- history charts -------------------------------------------------------------------------

  const histories = new Map(); // view key -> [{t, ...values}]

  // Remember a sample of the view `key`; returns the view's samples of the last minutes.
  function record(key, values) {
    const now = Date.now();
    let samples = histories.get(key);
    if (!samples) {
      samples = [];
      histories.set(key, samples);
      if (histories.size > MAX_HISTORIES) histories.delete(histories.keys().next().value);
    }
    samples.push({ t: now, ...values });
    while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();
    return samples;
  }

  function fmtAge(ms) {
    const s = Math.round(ms / 1000);
    return s >= 120 ? `${Math.round(s / 60)} min ago` : `${s} s ago`;
  }

  // A line chart of `series` ([{field, label, color}]) over `samples`, the y axis from 0.
  function chart(name, title, series, samples, format) {
    const width = 600;
    const height = 110;
    const now = samples.length ? samples[samples.length - 1].t : Date.now();
    const span = Math.min(HISTORY_MS, Math.max(60 * 1000, now - (samples.length ? samples[0].t : now)));
    let top = 0;
    for (const s of samples) {
      for (const line of series) if (isNum(s[line.field])) top = Math.max(top, s[line.field]);
    }
    const scale = top > 0 ? top * 1.1 : 1;
    const plot = svg("svg", {
      class: "chart-plot", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none",
      role: "img", "aria-label": title,
    }, [0.25, 0.5, 0.75].map((f) => svg("line", {
      class: "chart-grid", x1: 0, x2: width, y1: height * f, y2: height * f,
    })));
    for (const line of series) {
      const points = samples.filter((s) => isNum(s[line.field])).map((s) => {
        const x = width - ((now - s.t) / span) * width;
        const y = height - (s[line.field] / scale) * height;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      plot.append(svg("polyline", {
        class: "chart-line", "data-series": line.field, points: points.join(" "),
        stroke: line.color, fill: "none", "vector-effect": "non-scaling-stroke",
      }));
    }
    const last = samples[samples.length - 1] || {};
    return h("figure", { class: "chart panel", "data-chart": name, "data-samples": samples.length },
      h("figcaption", {},
        h("span", { class: "chart-title", text: title }),
        h("span", { class: "chart-legend" }, series.map((line) => h("span", { class: "chart-key" },
          h("span", { class: "swatch", style: `background:${line.color}` }),
          `${line.label} ${format(last[line.field])}`)))),
      h("div", { class: "chart-box" },
        h("span", { class: "chart-top", text: format(top) }),
        plot),
      h("div", { class: "chart-axis", "aria-hidden": "true" },
        h("span", { text: fmtAge(span) }), h("span", { text: "now" })));
  }

  window.StarquakeDashboard = {
    DASH, h, svg, isNum, fmtInt, fmtRate, fmtBytes, fmtByteRate, fmtText,
    loadAuth, saveAuth, HttpError, getJSON, record, chart,
  };
})();
