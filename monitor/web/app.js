// creditflow monitor page: draws GET /api/v1/view, kept fresh by the
// server-sent events of /api/v1/events. Charts are uPlot (vendored).
(function () {
  "use strict";
  const COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c"];
  const HEIGHT = 190;
  // Exposed for tests and for the curious: the charts, the number of data
  // points each one holds, and how many views were drawn.
  const state = { charts: {}, points: {}, updates: 0, view: null, topicsKey: "" };
  window.cfMonitor = state;

  const fmt = {
    int: (x) => (x === null || x === undefined ? "–" : String(x)),
    f4: (x) => x.toFixed(4),
    f2: (x) => x.toFixed(2),
    f0: (x) => x.toFixed(0),
    pct: (x) => (100 * x).toFixed(1) + "%",
  };
  const pctAxis = (u, vals) => vals.map((v) => (v == null ? "" : (100 * v).toFixed(0) + "%"));
  const intIncrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

  const KPIS = [
    ["samples", "samples", fmt.int],
    ["reward mean", "reward_mean", fmt.f4],
    ["success rate", "success_rate", fmt.pct],
    ["groups closed", "groups", fmt.int],
    ["zero-variance groups", "zero_variance_groups", fmt.int],
    ["zero-variance share", "zero_variance_share", fmt.pct],
    ["pass@G", "pass_at_g", fmt.pct],
    ["newest policy version", "newest_policy_version", fmt.int],
    ["mean policy lag", "policy_lag_mean", fmt.f2],
    ["mean scorer version lag", "scorer_lag_mean", fmt.f2],
    ["tokens per trajectory", "tokens_mean", fmt.f0],
    ["turns per trajectory", "turns_mean", fmt.f2],
    ["open groups", "open_groups", fmt.int],
    ["duplicates", "duplicates", fmt.int],
    ["undecodable records", "undecodable", fmt.int, true],
  ];

  // Chart definitions. kind: version (x = policy version), time (x = event
  // time), hist (fixed bins), rate (x = wall time).
  const CHARTS = [
    { id: "c-reward-version", kind: "version", y: (r) => r.reward_mean },
    { id: "c-success-version", kind: "version", y: (r) => r.success_rate, pct: true },
    { id: "c-reward-time", kind: "time", y: (s) => s.reward_mean },
    { id: "c-success-time", kind: "time", y: (s) => s.success_rate, pct: true },
    { id: "c-reward-hist", kind: "hist", h: (c) => c.reward, full: true },
    { id: "c-adv-hist", kind: "hist", h: (c) => c.advantage },
    { id: "c-zero-version", kind: "version", y: (r) => (r.groups ? r.zero_variance_share : null), pct: true },
    { id: "c-pass-version", kind: "version", y: (r) => (r.groups ? r.pass_at_g : null), pct: true },
    { id: "c-outadv-hist", kind: "hist", h: (c) => c.outcome_advantage },
    { id: "c-tokens-hist", kind: "hist", h: (c) => c.tokens },
    { id: "c-turns-hist", kind: "hist", h: (c) => c.turns, ints: true },
    { id: "c-rate", kind: "rate" },
    { id: "c-delta-version", kind: "version", pct: true, pair: ["+", "−"],
      y: (r) => (r.eligible_turns ? r.positive_delta_share : null), y2: (r) => (r.eligible_turns ? r.negative_delta_share : null),
      empty: "no LAPO samples" },
    { id: "c-gate-version", kind: "version", pct: true, y: (r) => (r.eligible_turns ? r.gate_pass_rate : null), empty: "no LAPO samples" },
    { id: "c-aproc-version", kind: "version", y: (r) => (r.eligible_turns ? r.mean_abs_process_advantage : null), empty: "no LAPO samples" },
    { id: "c-conf-hist", kind: "hist", h: (c) => c.confidence, full: true, empty: "no AttnSR samples" },
    { id: "c-baseline-time", kind: "time", y: (s) => s.baseline_mean, empty: "no AttnSR samples" },
    { id: "c-age-hist", kind: "hist", h: (c) => c.age_seconds, log: true },
    { id: "c-lag-hist", kind: "hist", h: (c) => c.policy_lag, ints: true },
    { id: "c-scorerlag-hist", kind: "hist", h: (c) => c.scorer_lag, ints: true, empty: "no sample carries the scorer's version" },
  ];

  // duration formats seconds with two significant digits in a fitting unit.
  function duration(v) {
    const units = [[86400 * 365, "y"], [86400, "d"], [3600, "h"], [60, "min"], [1, "s"], [0.001, "ms"]];
    for (const [n, name] of units) {
      if (v >= n || name === "ms") return +(v / n).toPrecision(2) + " " + name;
    }
    return String(v);
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function seriesFor(def, topics) {
    const out = [{}];
    topics.forEach((t, i) => {
      const c = COLORS[i % COLORS.length];
      // The first topic is drawn wide and the others narrow on top of it,
      // so that identical curves (a replay that changed nothing) stay visible.
      const base = { label: def.pair ? t + " " + def.pair[0] : t, stroke: i === 0 && topics.length > 1 ? c + "99" : c,
        width: i === 0 ? 4 : 1.75, spanGaps: def.kind === "time" };
      if (def.kind === "hist") {
        base.paths = uPlot.paths.stepped({ align: 1 });
        base.fill = c + "22";
        base.points = { show: false };
      } else if (def.kind === "version") {
        base.points = { show: true, size: i === 0 ? 9 : 5, fill: c };
      } else {
        base.points = { show: false };
      }
      if (def.pct) base.value = (u, v) => (v == null ? "–" : (100 * v).toFixed(1) + "%");
      out.push(base);
      if (def.pair) {
        out.push(Object.assign({}, base, { label: t + " " + def.pair[1], dash: [6, 4], points: { show: true, size: 6, fill: "#fff" } }));
      }
    });
    return out;
  }

  function makeChart(def, topics) {
    const box = document.getElementById(def.id);
    box.innerHTML = "";
    const x = { time: def.kind === "time" || def.kind === "rate" };
    if (def.log) x.distr = 3;
    const axes = [
      { stroke: "#6b7280", grid: { stroke: "#f0f1f3" }, ticks: { stroke: "#e5e7eb" } },
      { stroke: "#6b7280", grid: { stroke: "#f0f1f3" }, ticks: { stroke: "#e5e7eb" }, size: 52 },
    ];
    if (def.kind === "version") {
      axes[0].incrs = intIncrs;
      axes[0].values = (u, vals) => vals.map((v) => (Number.isInteger(v) && v >= 0 ? "v" + v : ""));
      // One version still gets a readable axis: half a version either side.
      // (uPlot pads a single x value to a wide range before calling this.)
      x.range = (u) => {
        const xs = u.data[0];
        if (!xs || !xs.length) return [0, 1];
        const lo = xs[0], hi = xs[xs.length - 1], pad = Math.max(0.5, (hi - lo) * 0.04);
        return [lo - pad, hi + pad];
      };
    }
    if (def.ints) axes[0].incrs = intIncrs;
    if (def.pct) axes[1].values = pctAxis;
    if (def.log) {
      // Decades (and 2×, 5× when the range is narrow), labelled as durations.
      axes[0].splits = (u, i, min, max) => {
        const out = [];
        if (!(min > 0) || !(max > min)) return out;
        const mults = Math.log10(max / min) < 2 ? [1, 2, 5] : [1];
        for (let k = Math.floor(Math.log10(min)); k <= Math.ceil(Math.log10(max)); k++) {
          mults.forEach((m) => {
            const v = m * Math.pow(10, k);
            if (v >= min && v <= max) out.push(v);
          });
        }
        return out;
      };
      axes[0].filter = (u, splits) => splits; // keep the 2×, 5× labels uPlot's log filter would drop
      axes[0].values = (u, vals) => vals.map((v) => (v == null ? "" : duration(v)));
      x.range = (u) => {
        const xs = u.data[0];
        return xs && xs.length > 1 ? [xs[0], xs[xs.length - 1]] : [0.01, 1e9];
      };
      axes[0].grid = { stroke: "#f0f1f3" };
    }
    const y = def.pct ? { range: [0, 1] } : {};
    if (def.kind === "hist" || def.kind === "rate") y.range = (u, min, max) => [0, max > 0 ? max * 1.08 : 1];
    const opts = {
      width: Math.max(200, box.clientWidth), height: HEIGHT,
      scales: { x: x, y: y }, axes: axes, series: seriesFor(def, topics),
      legend: { show: topics.length > 1 || !!def.pair, live: false },
      cursor: { drag: { x: false, y: false } },
    };
    const data = [[]].concat(opts.series.slice(1).map(() => []));
    const u = new uPlot(opts, data, box);
    const empty = el("div", { class: "empty" }, def.empty || "no data yet");
    box.appendChild(empty);
    state.charts[def.id] = u;
    return u;
  }

  function union(lists) {
    const s = new Set();
    lists.forEach((l) => l.forEach((v) => s.add(v)));
    return Array.from(s).sort((a, b) => a - b);
  }

  function chartData(def, view) {
    const topics = view.summary.topic_order;
    const charts = {};
    (view.charts || []).forEach((c) => (charts[c.topic] = c));
    if (def.kind === "version") {
      const rows = topics.map((t) => view.summary.topics[t].by_policy_version);
      const xs = union(rows.map((r) => r.map((v) => v.policy_version)));
      const data = [xs];
      rows.forEach((r) => {
        const by = {};
        r.forEach((v) => (by[v.policy_version] = v));
        data.push(xs.map((x) => (by[x] ? def.y(by[x]) : null)));
        if (def.pair) data.push(xs.map((x) => (by[x] ? def.y2(by[x]) : null)));
      });
      return data;
    }
    if (def.kind === "hist") {
      const hs = topics.map((t) => def.h(charts[t]));
      // Zoom to the bins that hold data (two empty bins either side), unless
      // the range itself means something (rewards, confidences in [0, 1]).
      let lo = 0, hi = hs[0].counts.length - 1;
      if (!def.full) {
        let first = Infinity, last = -1;
        hs.forEach((h) => h.counts.forEach((n, i) => {
          if (n > 0) { first = Math.min(first, i); last = Math.max(last, i); }
        }));
        if (last >= 0) { lo = Math.max(0, first - 2); hi = Math.min(hs[0].counts.length - 1, last + 2); }
      }
      const data = [hs[0].edges.slice(lo, hi + 2)];
      hs.forEach((h) => {
        const c = h.counts.slice(lo, hi + 1);
        data.push(c.concat([c[c.length - 1]]));
      });
      return data;
    }
    const tables = topics.map((t) => {
      const c = charts[t];
      if (def.kind === "rate") return [c.rate.t, c.rate.counts];
      return [c.event_time.t, def.y(c.event_time)];
    });
    if (tables.length === 1) return tables[0];
    return uPlot.join(tables);
  }

  function countPoints(def, data) {
    let n = 0;
    for (let i = 1; i < data.length; i++) {
      const ys = def.kind === "hist" ? data[i].slice(0, -1) : data[i];
      ys.forEach((v) => {
        if (v !== null && v !== undefined && (def.kind !== "hist" || v > 0)) n++;
      });
    }
    return n;
  }

  function drawCharts(view) {
    const topics = view.summary.topic_order;
    const key = topics.join("\u0000");
    if (key !== state.topicsKey) {
      state.topicsKey = key;
      CHARTS.forEach((d) => makeChart(d, topics));
      drawLegend(topics);
    }
    CHARTS.forEach((d) => {
      const u = state.charts[d.id];
      const data = chartData(d, view);
      const n = countPoints(d, data);
      state.points[d.id] = n;
      u.setData(data, true);
      u.root.parentNode.querySelector(".empty").style.display = n > 0 ? "none" : "flex";
    });
  }

  function drawLegend(topics) {
    const lg = document.getElementById("legend");
    lg.innerHTML = "";
    topics.forEach((t, i) => {
      const c = el("span", { class: "chip" });
      const sw = el("i");
      sw.style.background = COLORS[i % COLORS.length];
      c.appendChild(sw);
      c.appendChild(document.createTextNode(t));
      lg.appendChild(c);
    });
  }

  function recentRate(c) {
    const n = c.rate.counts.length;
    const last = c.rate.counts.slice(Math.max(0, n - 10));
    if (!last.length) return 0;
    return last.reduce((a, b) => a + b, 0) / last.length;
  }

  function drawKpis(view) {
    const s = view.summary;
    const topics = s.topic_order;
    const cols = topics.map((t) => ({ name: t, data: s.topics[t], id: t }));
    if (topics.length > 1) cols.push({ name: "all topics", data: s, id: "*" });
    const table = document.getElementById("kpis");
    const head = el("tr");
    head.appendChild(el("th", {}, ""));
    cols.forEach((c, i) => {
      const th = el("th", {}, c.name);
      if (c.id !== "*") th.style.borderBottom = "3px solid " + COLORS[i % COLORS.length];
      head.appendChild(th);
    });
    table.tHead.replaceChildren(head);
    const rows = [];
    KPIS.forEach(([label, key, f, bad]) => {
      const tr = el("tr");
      let anyBad = false;
      tr.appendChild(el("td", {}, key === "success_rate" ? label + " (reward ≥ " + s.success_threshold + ")" : label));
      cols.forEach((c) => {
        const v = c.data[key];
        if (bad && v > 0) anyBad = true;
        tr.appendChild(el("td", { class: "num", "data-topic": c.id, "data-key": key }, v === null || v === undefined ? "–" : f(v)));
      });
      if (anyBad) tr.className = "bad";
      rows.push(tr);
    });
    const tr = el("tr");
    tr.appendChild(el("td", {}, "samples/s (last 10 s)"));
    const charts = {};
    (view.charts || []).forEach((c) => (charts[c.topic] = c));
    cols.forEach((c) => {
      const r = c.id === "*" ? topics.reduce((a, t) => a + recentRate(charts[t]), 0) : recentRate(charts[c.id]);
      tr.appendChild(el("td", { class: "num", "data-topic": c.id, "data-key": "samples_per_second" }, r.toFixed(1)));
    });
    rows.push(tr);
    table.tBodies[0].replaceChildren(...rows);

    drawSources(s, cols);
    const rd = view.reading;
    if (rd) {
      const info = [["topics", rd.topics.join("\n")], ["dead letters", rd.dead_letters || "–"],
        ["policy topic", rd.policy || "–"], ["announced version", s.newest_announced_version == null ? "–" : String(s.newest_announced_version)],
        ["from", rd.from],
        ["success", "reward ≥ " + s.success_threshold], ["partial group closes after", rd.group_idle]];
      document.getElementById("reading").tBodies[0].replaceChildren(...info.map(([k, v]) => {
        const tr = el("tr");
        tr.appendChild(el("td", {}, k));
        tr.appendChild(el("td", {}, v));
        return tr;
      }));
    }
    const dead = document.getElementById("dead").tBodies[0];
    const drows = [];
    const reasons = Object.keys(s.dead_letters).sort();
    reasons.forEach((r) => {
      const tr = el("tr");
      tr.appendChild(el("td", {}, r));
      tr.appendChild(el("td", { class: "num", "data-reason": r }, String(s.dead_letters[r])));
      drows.push(tr);
    });
    const tot = el("tr");
    tot.appendChild(el("td", {}, reasons.length ? "total" : "none"));
    tot.appendChild(el("td", { class: "num", "data-key": "dead_letters_total" }, String(s.dead_letters_total)));
    drows.push(tot);
    dead.replaceChildren(...drows);
  }

  // One row per data source and topic.
  function drawSources(s, cols) {
    const table = document.getElementById("sources");
    const per = [["samples", "samples", fmt.int], ["reward mean", "reward_mean", fmt.f4], ["success rate", "success_rate", fmt.pct],
      ["groups", "groups", fmt.int], ["zero-variance groups", "zero_variance_groups", fmt.int], ["pass@G", "pass_at_g", fmt.pct]];
    const head = el("tr");
    ["source", "topic"].concat(per.map((p) => p[0])).forEach((h) => head.appendChild(el("th", {}, h)));
    table.tHead.replaceChildren(head);
    const rows = [];
    const names = [];
    cols.forEach((c) => c.id !== "*" && (c.data.by_source || []).forEach((r) => names.includes(r.source) || names.push(r.source)));
    names.sort().forEach((n) => cols.forEach((c, i) => {
      if (c.id === "*") return;
      const r = (c.data.by_source || []).find((x) => x.source === n);
      if (!r) return;
      const tr = el("tr");
      tr.appendChild(el("td", {}, n));
      const tc = el("td", {}, c.name);
      tc.style.borderLeft = "3px solid " + COLORS[i % COLORS.length];
      tr.appendChild(tc);
      per.forEach(([, key, f]) => tr.appendChild(el("td", { class: "num", "data-topic": c.id, "data-source": n, "data-key": key }, f(r[key]))));
      rows.push(tr);
    }));
    table.tBodies[0].replaceChildren(...rows);
  }

  function render(view) {
    state.view = view;
    drawKpis(view);
    drawCharts(view);
    state.updates++;
    const st = document.getElementById("status");
    st.className = "status live";
    st.textContent = (SNAPSHOT ? "snapshot · " : "live · ") + new Date().toLocaleTimeString();
  }

  // ?snapshot draws the view once and opens no event stream: a headless
  // browser waits for the page to settle only when no request stays open.
  const SNAPSHOT = new URLSearchParams(location.search).has("snapshot");

  function connect() {
    if (SNAPSHOT) return;
    const es = new EventSource("api/v1/events");
    es.addEventListener("view", (e) => render(JSON.parse(e.data)));
    es.onerror = () => {
      const st = document.getElementById("status");
      st.className = "status down";
      st.textContent = "reconnecting…";
    };
  }

  window.addEventListener("resize", () => {
    for (const id in state.charts) {
      const u = state.charts[id];
      u.setSize({ width: Math.max(200, u.root.parentNode.clientWidth), height: HEIGHT });
    }
  });

  fetch("api/v1/view").then((r) => r.json()).then(render).catch(() => {}).finally(connect);
})();
