// creditflow monitor: the samples view (GET /api/v1/samples) and the
// sample view (GET /api/v1/samples/{trajectory_id}), side by side over two
// topics. Views are chosen by the URL's hash: #view=samples[&order=…&by=…
// &topic=…&limit=…], #view=sample&id=…[&topic=…&compare=…&color=…].
(function () {
  "use strict";
  const state = { list: [], listURL: "", views: [], scale: 1, color: null, diff: null, rendered: 0 };
  // ?snapshot: draw once and stop (no polling), so that a headless browser
  // can wait for the page to settle (docs/monitor.md, the screenshot recipe).
  const SNAPSHOT = new URLSearchParams(location.search).has("snapshot");
  let wantMode = "advantage"; // "color by", kept from sample to sample
  window.cfMonitor = window.cfMonitor || {};
  window.cfMonitor.samples = state;

  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const none = (x) => x === null || x === undefined;
  const differ = (x, y) => none(x) !== none(y) || (!none(x) && Math.abs(x - y) > 1e-12);
  const num = (x, d) => (x === null || x === undefined ? "–" : Number(x).toFixed(d === undefined ? 4 : d));

  function params() {
    return new URLSearchParams(location.hash.replace(/^#/, ""));
  }
  function go(p) {
    location.hash = new URLSearchParams(p).toString();
  }

  // Topics known to the page: from the overview's view (or, before it
  // arrived, the view read at start).
  let startTopics = [];
  function topics() {
    const v = window.cfMonitor.view;
    return v ? v.summary.topic_order : startTopics;
  }
  function fillTopics(sel, withAll, keep) {
    const ts = topics();
    const key = ts.join("\u0000");
    if (sel.dataset.key === key) return;
    sel.dataset.key = key;
    const cur = sel.value;
    sel.replaceChildren();
    if (withAll !== undefined) sel.appendChild(el("option", { value: "" }, withAll));
    ts.forEach((t) => sel.appendChild(el("option", { value: t }, t)));
    sel.value = keep !== undefined ? keep : cur;
  }

  // ---- samples view ----------------------------------------------------

  function listURL() {
    const q = new URLSearchParams({ order: $("s-order").value, by: $("s-by").value, limit: $("s-limit").value });
    if ($("s-topic").value) q.set("topic", $("s-topic").value);
    return "api/v1/samples?" + q.toString();
  }

  function loadList() {
    const url = listURL();
    return fetch(url).then((r) => r.json()).then((refs) => {
      state.list = refs;
      state.listURL = url;
      drawList(refs);
    });
  }

  function drawList(refs) {
    const rows = refs.map((r) => {
      const tr = el("tr");
      const td = el("td");
      const a = el("a", { href: "#" + new URLSearchParams({ view: "sample", id: r.trajectory_id, topic: r.topic }).toString() }, r.trajectory_id);
      td.appendChild(a);
      tr.appendChild(td);
      const cells = [["topic", r.topic], ["partition", String(r.partition)], ["offset", String(r.offset)], ["reward", num(r.reward)],
        ["process", num(r.process)], ["outcome_advantage", num(r.outcome_advantage)], ["method", r.method],
        ["policy_version", String(r.policy_version)], ["prompt_id", r.prompt_id], ["tokens", String(r.tokens)], ["turns", String(r.turns)]];
      cells.forEach(([k, v]) => tr.appendChild(el("td", { "data-key": k }, v)));
      return tr;
    });
    if (!rows.length) {
      const tr = el("tr");
      tr.appendChild(el("td", { colspan: "12" }, "no samples yet"));
      rows.push(tr);
    }
    $("s-table").tBodies[0].replaceChildren(...rows);
  }

  // ---- sample view -----------------------------------------------------

  function sampleURL(id, topic) {
    return "api/v1/samples/" + encodeURIComponent(id) + (topic ? "?topic=" + encodeURIComponent(topic) : "");
  }

  function fetchSample(id, topic) {
    return fetch(sampleURL(id, topic)).then((r) => r.json().then((b) => {
      if (!r.ok) throw new Error(b.error || r.statusText);
      return b;
    }));
  }

  // "Color by": what a policy token's background shows. A per-token
  // quantity (the advantage or token reward, or its process part), or a
  // per-turn one (LAPO Δ, z̃, A_proc; AttnSR p_k, s_k, w̃) drawn on every
  // policy token of its turn, on a scale of its own: a diverging scale
  // around center up to the largest |x − center| shown, so that the turn
  // with the largest value is drawn fully and the others in proportion
  // (the legend starts at floor for a quantity never below it).
  const MODES = {
    advantage: { label: "advantage / token reward" },
    process: { label: "advantage − A_out (process part)" },
    delta: { label: "Δ (LAPO, per turn)", turn: "delta", method: "lapo", none: "turn not eligible" },
    z_norm: { label: "z̃ (LAPO, per turn)", turn: "z_norm", method: "lapo", none: "turn not eligible" },
    process_advantage: { label: "A_proc (LAPO, per turn)", turn: "process_advantage", method: "lapo", none: "turn not eligible" },
    p: { label: "p_k (AttnSR, per step)", turn: "p", method: "attnsr", floor: 0, none: "final step" },
    step_reward: { label: "s_k (AttnSR, per step)", turn: "step_reward", method: "attnsr", none: "final step" },
    weight: { label: "w̃ (AttnSR, per step)", turn: "weight", method: "attnsr", center: 1, floor: 0, none: "ppo output" },
  };
  const SYMBOL = { delta: "Δ", z_norm: "z̃", process_advantage: "A_proc", p: "p_k", step_reward: "s_k", weight: "w̃" };
  function modesFor(method) {
    return Object.keys(MODES).filter((k) => !MODES[k].method || MODES[k].method === method);
  }

  // The value of every token under mode: null off policy, NaN for a policy
  // token without one (a turn that is not eligible, AttnSR's final step).
  function values(v, mode) {
    const def = MODES[mode] || MODES.advantage;
    if (def.turn) {
      const out = v.tokens.map(() => null);
      v.turns.forEach((t) => {
        const x = t[def.turn];
        for (let i = t.action[0]; i < t.action[1]; i++) if (v.loss_mask[i]) out[i] = none(x) ? NaN : x;
      });
      return out;
    }
    const arr = v.advantages || v.token_rewards || [];
    return v.tokens.map((_, i) => {
      if (!v.loss_mask[i]) return null;
      const x = arr[i] === undefined ? 0 : arr[i];
      return mode === "process" && v.advantages ? x - v.outcome_advantage : x;
    });
  }
  const has = (x) => x !== null && !Number.isNaN(x);

  // Diverging scale: red (below center) – white (center) – blue (above),
  // |x − center| ≤ m.
  const NEG = [178, 24, 43], POS = [33, 102, 172];
  function color(x, m, center) {
    const t = Math.max(-1, Math.min(1, (x - (center || 0)) / m));
    const c = t < 0 ? NEG : POS;
    const a = Math.abs(t);
    const mix = (k) => Math.round(255 + (c[k] - 255) * a);
    return "rgb(" + mix(0) + "," + mix(1) + "," + mix(2) + ")";
  }

  function drawLegend(sc, mode, anyInexact) {
    const { m, center } = sc;
    const def = MODES[mode];
    const lg = $("v-legend");
    lg.replaceChildren();
    let what = mode === "process" ? "advantage − A_out per policy token" : state.views.some((v) => v.output === "token_rewards") ? "token reward per policy token" : "advantage per policy token";
    if (def.turn) what = SYMBOL[mode] + (def.method === "attnsr" ? " of the step" : " of the turn") + ", on its policy tokens";
    lg.appendChild(el("span", { class: "lab" }, what + ":"));
    const lo = def.floor !== undefined ? Math.max(def.floor, center - m) : center - m;
    lg.appendChild(el("span", { class: "tick", "data-key": "scale-min" }, lo < 0 ? "−" + (-lo).toPrecision(3) : lo.toPrecision(3)));
    const bar = el("span", { class: "bar" });
    const stops = [];
    for (let i = 0; i <= 10; i++) stops.push(color(lo + ((center + m - lo) * i) / 10, m, center));
    bar.style.background = "linear-gradient(to right," + stops.join(",") + ")";
    lg.appendChild(bar);
    lg.appendChild(el("span", { class: "tick", "data-key": "scale-max" }, (center ? "" : "+") + (center + m).toPrecision(3)));
    if (def.turn) {
      lg.appendChild(el("span", { class: "tok nov sw" }, "no " + SYMBOL[mode]));
      lg.appendChild(el("span", { class: "lab" }, "(" + def.none + ")"));
    }
    const off = el("span", { class: "tok off sw" }, "prompt, observation");
    lg.appendChild(off);
    lg.appendChild(el("span", { class: "lab" }, "off-policy (not trained on)"));
    if (state.views.length > 1) {
      lg.appendChild(el("span", { class: "tok sw tdiff" }, "value"));
      lg.appendChild(el("span", { class: "lab" }, "advantage (token reward) differs between the two topics"));
    }
    if (anyInexact) lg.appendChild(el("span", { class: "warn" }, "turn boundaries inside touching actions are approximate (turns_exact = false)"));
  }

  const LAPO_KEYS = [["Δ", "delta"], ["S with", "with"], ["S without", "without"], ["z", "z"], ["z̃", "z_norm"], ["gate", "gate", 0], ["A_proc", "process_advantage"]];
  const ATTN_KEYS = [["p_k", "p"], ["s_k", "step_reward"], ["w̃", "weight"]];

  function turnDiag(v, t, other, sc) {
    const box = el("div", { class: "diag" });
    const keys = (v.method === "attnsr" ? ATTN_KEYS : LAPO_KEYS).concat([["advantage", "advantage"]]);
    box.appendChild(el("span", { class: "kind" }, "turn " + t.index + " · " + t.kind + (v.method === "lapo" ? (t.eligible ? " · eligible" : " · not eligible") : "")));
    keys.forEach(([label, key, d]) => {
      const val = t[key];
      const c = el("span", { class: "chip", "data-turn": String(t.index), "data-key": key }, "");
      c.appendChild(el("i", {}, label));
      c.appendChild(el("b", {}, val === null || val === undefined ? "–" : num(val, d)));
      if (key === MODES[sc.mode].turn) {
        // The quantity the tokens are colored by: the chip in its color.
        c.classList.add("sel");
        if (!none(val)) {
          c.style.background = color(val, sc.m, sc.center);
          if (Math.abs(val - sc.center) / sc.m > 0.6) c.style.color = "#fff";
        }
      }
      const o = other && other.turns[t.index];
      if (o && differ(val, o[key])) {
        c.classList.add("diff");
        c.title = "other topic: " + (o[key] === null || o[key] === undefined ? "–" : num(o[key], d));
      }
      box.appendChild(c);
    });
    return box;
  }

  // tokens draws tokens [a, b) of v: vals[i] is what token i is colored by,
  // base[i] its advantage (token reward), compared with otherBase (the same
  // trajectory in another topic) to mark the tokens that differ.
  function tokens(v, vals, base, sc, a, b, other, otherBase) {
    const box = el("div", { class: "text" });
    const sym = MODES[sc.mode].turn ? SYMBOL[sc.mode] + " " : v.advantages ? "advantage " : "token reward ";
    for (let i = a; i < b; i++) {
      const off = !v.loss_mask[i];
      const s = el("span", { class: off ? "tok off" : "tok", "data-i": String(i) }, v.text[i]);
      if (!off) {
        if (has(vals[i])) {
          s.style.background = color(vals[i], sc.m, sc.center);
          if (Math.abs(vals[i] - sc.center) / sc.m > 0.6) s.style.color = "#fff";
          s.dataset.v = String(vals[i]);
        } else {
          s.classList.add("nov");
        }
        if (other && otherBase && (other.tokens[i] !== v.tokens[i] || otherBase[i] === null || Math.abs(otherBase[i] - base[i]) > 1e-9)) s.classList.add("tdiff");
      }
      s.title = "#" + i + " id " + v.tokens[i] + (off ? " (off-policy)" : " · " + sym + (has(vals[i]) ? vals[i] : "–"));
      box.appendChild(s);
    }
    return box;
  }

  const FACTS = [["reward", "reward", (v) => num(v.reward)], ["outcome advantage A_out", "outcome_advantage", (v) => num(v.outcome_advantage)],
    ["process credit", "process", (v) => num(v.process)],
    ["group", "group", (v) => v.prompt_id + " · member " + v.sample_index + " of " + v.group_size + (v.partial ? " (partial)" : "")],
    ["method", "method", (v) => v.method + " → " + v.output], ["policy version", "policy_version", (v) => String(v.policy_version)],
    ["scorer version", "scorer_policy_version", (v) => (v.scorer_policy_version == null ? "–" : String(v.scorer_policy_version))],
    ["record", "record", (v) => v.topic + " / " + v.partition + " @ " + v.offset],
    ["tokens", "tokens", (v) => String(v.tokens.length) + " (" + v.loss_mask.reduce((a, b) => a + b, 0) + " policy)"],
    ["source", "source", (v) => v.source || "–"], ["tokenizer", "tokenizer", (v) => v.tokenizer]];

  function column(v, vals, base, sc, other, otherBase, side) {
    const col = el("div", { class: "card col", "data-side": side, "data-topic": v.topic });
    col.appendChild(el("h2", {}, v.topic));
    const facts = el("table", { class: "kpis facts" });
    const tb = el("tbody");
    FACTS.forEach(([label, key, f]) => {
      const tr = el("tr");
      tr.appendChild(el("td", {}, label));
      const td = el("td", { class: "num", "data-key": key }, f(v));
      if (other && f(other) !== f(v) && key !== "record") td.classList.add("diff");
      tr.appendChild(td);
      tb.appendChild(tr);
    });
    if (v.attnsr) {
      ["confidence", "focus", "consensus", "baseline", "budget"].forEach((k) => {
        const tr = el("tr");
        tr.appendChild(el("td", {}, "AttnSR " + k));
        tr.appendChild(el("td", { class: "num", "data-key": "attnsr." + k }, num(v.attnsr[k])));
        tb.appendChild(tr);
      });
    }
    facts.appendChild(tb);
    col.appendChild(facts);

    const seg = el("div", { class: "segment prompt" });
    seg.appendChild(el("div", { class: "seglab" }, "prompt · off-policy"));
    seg.appendChild(tokens(v, vals, base, sc, 0, v.prompt_end, other, otherBase));
    col.appendChild(seg);
    const key = MODES[sc.mode].turn;
    v.turns.forEach((t) => {
      const ts = el("div", { class: "segment turn", "data-turn": String(t.index) });
      if (key) ts.style.borderLeftColor = none(t[key]) ? "transparent" : color(t[key], sc.m, sc.center);
      if (key) ts.classList.add("shaded");
      ts.appendChild(turnDiag(v, t, other, sc));
      ts.appendChild(el("div", { class: "seglab" }, "action · policy tokens " + t.action[0] + "–" + t.action[1]));
      ts.appendChild(tokens(v, vals, base, sc, t.action[0], t.action[1], other, otherBase));
      if (t.observation[1] > t.observation[0]) {
        ts.appendChild(el("div", { class: "seglab" }, "observation · off-policy"));
        ts.appendChild(tokens(v, vals, base, sc, t.observation[0], t.observation[1], other, otherBase));
      }
      col.appendChild(ts);
    });
    return col;
  }

  // fillModes offers the choices that fit the method of the sample shown
  // and selects want (the advantage when it does not fit).
  function fillModes(method, want) {
    const sel = $("v-color");
    const ks = modesFor(method);
    if (sel.dataset.key !== ks.join(",")) {
      sel.dataset.key = ks.join(",");
      sel.replaceChildren(...ks.map((k) => el("option", { value: k }, MODES[k].label)));
    }
    sel.value = ks.includes(want) ? want : "advantage";
    return sel.value;
  }

  function drawSample() {
    const vs = state.views;
    const mode = fillModes(vs[0].method, wantMode);
    const def = MODES[mode];
    const vals = vs.map((v) => values(v, mode));
    const base = vs.map((v) => values(v, "advantage"));
    const center = def.center || 0;
    let m = 0;
    vals.forEach((a) => a.forEach((x) => { if (has(x)) m = Math.max(m, Math.abs(x - center)); }));
    if (!(m > 0)) m = 1;
    const sc = { mode: mode, m: m, center: center };
    state.scale = m;
    state.color = sc;
    drawLegend(sc, mode, vs.some((v) => !v.turns_exact));
    const cols = vs.map((v, k) => column(v, vals[k], base[k], sc, vs[1 - k], base[1 - k], k === 0 ? "left" : "right"));
    $("v-cols").className = "cols n" + vs.length;
    $("v-cols").replaceChildren(...cols);
    const ds = $("v-diff");
    if (vs.length === 2) {
      const [a, b] = base;
      let n = 0, maxd = 0;
      const same = vs[0].tokens.length === vs[1].tokens.length && vs[0].tokens.every((x, i) => x === vs[1].tokens[i]);
      if (same) {
        a.forEach((x, i) => {
          if (x === null) return;
          const d = Math.abs(x - b[i]);
          if (d > 1e-9) { n++; maxd = Math.max(maxd, d); }
        });
      }
      state.diff = { sameTokens: same, tokensDiffer: n, maxAbsDiff: maxd };
      ds.hidden = false;
      ds.textContent = same
        ? n + " of " + a.filter((x) => x !== null).length + " policy tokens' " + (vs[0].advantages ? "advantages" : "token rewards") + " differ between " + vs[0].topic + " and " + vs[1].topic +
          (n ? " (largest |difference| " + maxd.toPrecision(3) + ")" : "") + "; reward " + num(vs[0].reward) + " vs " + num(vs[1].reward) + "."
        : "the two topics hold different token sequences for this trajectory_id";
      ds.dataset.n = String(n);
    } else {
      state.diff = null;
      ds.hidden = true;
    }
    state.rendered++;
  }

  function loadSample(p) {
    const id = p.get("id");
    const topic = p.get("topic") || "";
    const cmp = p.get("compare") || "";
    $("v-id").textContent = id;
    fillTopics($("v-topic"), undefined, topic);
    $("v-topic").value = topic;
    fillTopics($("v-compare"), "—", cmp);
    $("v-compare").value = cmp;
    if (p.get("color")) wantMode = p.get("color");
    const err = $("v-error");
    err.hidden = true;
    const reqs = [fetchSample(id, topic)];
    if (cmp && cmp !== topic) reqs.push(fetchSample(id, cmp).catch((e) => ({ error: cmp + ": " + (e.message || e) })));
    return Promise.all(reqs).then((vs) => {
      // A topic to compare with that lacks the sample: show the one found.
      const missing = vs.filter((v) => v.error);
      state.views = vs.filter((v) => !v.error);
      if (missing.length) {
        err.hidden = false;
        err.textContent = missing.map((v) => v.error).join("; ");
      }
      if (!topic) $("v-topic").value = vs[0].topic;
      if (state.views.length) drawSample();
      else state.rendered++;
    }).catch((e) => {
      err.hidden = false;
      err.textContent = String(e.message || e);
      state.views = [];
      $("v-cols").replaceChildren();
      state.rendered++;
    });
  }

  // ---- routing -----------------------------------------------------------

  let timer = null;
  function route() {
    const p = params();
    const view = p.get("view") || "overview";
    ["overview", "samples", "sample"].forEach((v) => ($(v).hidden = v !== view));
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("on", a.dataset.view === view || (view === "sample" && a.dataset.view === "samples")));
    clearInterval(timer);
    if (view === "samples") {
      fillTopics($("s-topic"), "all topics");
      // The list's choices may come with the URL: #view=samples&order=worst&by=process&topic=T&limit=50.
      LIST.forEach(([id, k]) => {
        const x = p.get(k);
        if (x !== null && Array.from($(id).options).some((o) => o.value === x)) $(id).value = x;
      });
      loadList();
      if (!SNAPSHOT) timer = setInterval(() => { fillTopics($("s-topic"), "all topics"); loadList(); }, 5000);
    } else if (view === "sample") {
      loadSample(p);
    } else {
      window.dispatchEvent(new Event("resize")); // charts drawn while hidden
    }
  }

  // replaceHash records a choice in the URL without reloading the view.
  function replaceHash(p) {
    history.replaceState(null, "", "#" + new URLSearchParams(p).toString());
  }

  const LIST = [["s-order", "order"], ["s-by", "by"], ["s-topic", "topic"], ["s-limit", "limit"]];
  LIST.forEach(([id]) => $(id).addEventListener("change", () => {
    const q = { view: "samples" };
    LIST.forEach(([i, k]) => { if ($(i).value) q[k] = $(i).value; });
    replaceHash(q);
    loadList();
  }));
  $("s-search").addEventListener("submit", (e) => {
    e.preventDefault();
    const id = $("s-id").value.trim();
    if (id) go({ view: "sample", id: id, topic: $("s-topic").value });
  });
  ["v-topic", "v-compare"].forEach((id) => $(id).addEventListener("change", () => {
    const p = params();
    const q = { view: "sample", id: p.get("id"), topic: $("v-topic").value };
    if ($("v-compare").value) q.compare = $("v-compare").value;
    if (wantMode !== "advantage") q.color = wantMode;
    go(q);
  }));
  $("v-color").addEventListener("change", () => {
    wantMode = $("v-color").value;
    const p = params();
    p.set("color", wantMode);
    replaceHash(p);
    if (state.views.length) drawSample();
  });
  window.addEventListener("hashchange", route);
  fetch("api/v1/view").then((r) => r.json()).then((v) => (startTopics = v.summary.topic_order)).catch(() => {}).finally(route);
})();
