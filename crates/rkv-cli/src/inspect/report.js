// rkv inspect report: renders the embedded record (docs/inspect.md). No network.
// DOM hooks for tests: each token is one `span.tok` with `data-pos` and, after a
// render, `data-kept` (the (layer, head) pairs of the shown policy holding it after the
// shown event; -1 when not yet written); `#state` carries `data-policy`, `data-event`
// and `data-events`; `body` gets `data-render-ms` once the first render is done and
// `data-dups-ms` once the near-duplicate groups (which read every event) are. The
// URL fragment `#policy=i&event=k&view=compare&token=p` chooses what is shown.
"use strict";
(function () {
  const t0 = Math.round(performance.now());
  const D = JSON.parse(document.getElementById("rkv-data").textContent);
  document.body.dataset.parseMs = `${t0}+${Math.round(performance.now()) - t0}`;
  const N = D.tokens.length;
  const P = D.policies;
  const $ = (id) => document.getElementById(id);
  const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const fmt = (x, d) => (x === null || x === undefined || Number.isNaN(x) ? "-" : Number(x).toPrecision(d || 3));
  const show = (t) => JSON.stringify(t).slice(1, -1);

  // ---- decoding -------------------------------------------------------------------
  function f16(h) {
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e === 0) return s * m * 5.960464477539063e-8;
    if (e === 31) return m ? NaN : s * Infinity;
    return s * (1 + m / 1024) * Math.pow(2, e - 15);
  }
  // Per-head byte records of one event (docs/inspect.md, "the packed record").
  function bytes(b64) {
    const bin = atob(b64), u = new Uint8Array(bin.length);
    for (let i = 0; i < u.length; i++) u[i] = bin.charCodeAt(i);
    return u;
  }
  const cache = new Map();
  function memo(key, f) {
    if (!cache.has(key)) cache.set(key, f());
    return cache.get(key);
  }
  function span(a, b) { // positions a..=b
    const out = new Int32Array(Math.max(0, b - a + 1));
    for (let i = 0; i < out.length; i++) out[i] = a + i;
    return out;
  }
  function flatRanges(r) {
    const out = [];
    for (let i = 0; i < r.length; i += 2) for (let p = r[i]; p < r[i + 1]; p++) out.push(p);
    return Int32Array.from(out);
  }
  // Per (layer, head) of event k, layer-major: resident positions (slot order), kept
  // positions, the kept bitmask over slots, importance, redundancy, redundant_by.
  function eventHeads(pi, k) {
    return memo("ev" + pi + "/" + k, () => {
      const pol = P[pi], ev = pol.events[k], n = pol.n_layers * pol.n_kv_heads;
      const len = ev.slots_before, mb = (len + 7) >> 3;
      const stride = mb + 2 * ev.n_imp + 2 * ev.n_red + 4 * ev.n_by;
      const raw = bytes(ev.heads), dv = new DataView(raw.buffer);
      const prev = k > 0 ? eventHeads(pi, k - 1) : null;
      const out = [];
      for (let i = 0; i < n; i++) {
        let res;
        if (ev.resident) res = flatRanges(ev.resident[i]);
        else if (!prev) res = span(0, ev.position);
        else {
          const pk = prev[i].kept, tail = span(pol.events[k - 1].position + 1, ev.position);
          res = new Int32Array(pk.length + tail.length);
          res.set(pk); res.set(tail, pk.length);
        }
        let o = i * stride;
        const mask = raw.subarray(o, o + mb), kept = [];
        for (let s = 0; s < res.length; s++) if (mask[s >> 3] & (1 << (s & 7))) kept.push(res[s]);
        out.push({ res, kept: Int32Array.from(kept), mask, dv, at: o + mb });
      }
      return out;
    });
  }
  // The scores of event k's heads (decoded on first use): importance, redundancy,
  // redundant_by, each null where the policy has none.
  function scores(pi, k) {
    return memo("sc" + pi + "/" + k, () => {
      const ev = P[pi].events[k];
      return eventHeads(pi, k).map(({ dv, at }) => {
        let o = at;
        const f = (m) => { const a = new Float32Array(m); for (let j = 0; j < m; j++) a[j] = f16(dv.getUint16(o + 2 * j, true)); o += 2 * m; return a; };
        const imp = ev.n_imp ? f(ev.n_imp) : null, red = ev.n_red ? f(ev.n_red) : null;
        let by = null;
        if (ev.n_by) { by = new Int32Array(ev.n_by); for (let j = 0; j < ev.n_by; j++) by[j] = dv.getInt32(o + 4 * j, true); }
        return { imp, red, by };
      });
    });
  }
  // Holders of each position after event k: total pairs and per layer.
  function retention(pi, k) {
    return memo("ret" + pi + "/" + k, () => {
      const pol = P[pi], L = pol.n_layers, H = pol.n_kv_heads;
      const total = new Int16Array(N), layer = new Uint8Array(L * N);
      if (k < 0) return { total, layer };
      eventHeads(pi, k).forEach((h, i) => {
        const l = Math.floor(i / H);
        for (const p of h.kept) if (p < N) { total[p]++; layer[l * N + p]++; }
      });
      return { total, layer };
    });
  }
  function lowerBound(a, p) { // first index with a[i] >= p
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < p) lo = m + 1; else hi = m; }
    return lo;
  }

  // ---- state ------------------------------------------------------------------------
  const st = { pi: 0, k: 0, view: "single", sel: null };
  (function readFragment() {
    const f = new URLSearchParams(location.hash.slice(1));
    const pi = parseInt(f.get("policy"), 10), k = parseInt(f.get("event"), 10), t = parseInt(f.get("token"), 10);
    if (pi >= 0 && pi < P.length) st.pi = pi;
    if (f.get("view") === "compare" && P.length > 1) st.view = "compare";
    const E = P.length ? P[st.pi].events.length : 0;
    st.k = k >= 0 ? Math.min(k, E - 1) : E > 0 ? 0 : -1;
    if (t >= 0 && t < N) st.sel = t;
  })();
  const pairs = (pi) => P[pi].n_layers * P[pi].n_kv_heads;
  const evPos = (pi, k) => (k >= 0 && k < P[pi].events.length ? P[pi].events[k].position : N - 1);
  const kFor = (pi) => Math.min(st.k, P[pi].events.length - 1);

  // ---- header -------------------------------------------------------------------------
  $("meta").textContent = `${D.model} · ${D.source} · ${N} tokens (${D.prompt_tokens} prompt)`;
  {
    let h = "<tr><th>policy</th><th>budget</th><th>buffer</th><th>window</th><th>lambda</th><th>events</th><th>mean KL to FullKV</th></tr>";
    for (const p of P) {
      const kl = p.kl.filter((x) => x !== null);
      const mean = kl.reduce((a, b) => a + b, 0) / Math.max(1, kl.length);
      h += `<tr><td>${esc(p.policy)}</td><td>${p.budget}</td><td>${p.buffer}</td><td>${p.window}</td><td>${fmt(p.lambda, 2)}</td><td data-events="${p.events.length}">${p.events.length}</td><td>${fmt(mean, 4)}</td></tr>`;
    }
    $("summary").innerHTML = h;
    const v = $("view");
    v.innerHTML = P.map((p, i) => `<option value="${i}">${esc(p.policy)}</option>`).join("") +
      (P.length > 1 ? `<option value="compare">compare ${esc(P[0].policy)} / ${esc(P[1].policy)}</option>` : "");
    v.value = st.view === "compare" ? "compare" : String(st.pi);
    v.onchange = () => {
      if (v.value === "compare") st.view = "compare";
      else { st.view = "single"; st.pi = +v.value; }
      render();
    };
  }

  // ---- tokens -------------------------------------------------------------------------
  const spans = new Array(N);
  {
    const frag = document.createDocumentFragment();
    for (let i = 0; i < N; i++) {
      const s = document.createElement("span");
      const t = D.tokens[i];
      s.className = "tok" + (i < D.prompt_tokens ? " prompt" : "") + (t.startsWith("\n") ? " nl" : "");
      s.dataset.pos = i;
      s.textContent = t;
      spans[i] = s;
      frag.appendChild(s);
    }
    $("tokens").appendChild(frag);
    $("tokens").addEventListener("click", (e) => {
      const p = e.target.dataset && e.target.dataset.pos;
      if (p !== undefined) select(+p);
    });
  }
  function shadeSingle() {
    const pi = st.pi, k = kFor(pi), r = retention(pi, k), n = pairs(pi), upto = evPos(pi, k);
    for (let i = 0; i < N; i++) {
      const s = spans[i];
      if (i > upto) {
        s.classList.add("future"); s.style.background = ""; s.dataset.kept = -1;
        continue;
      }
      s.classList.remove("future");
      const c = r.total[i];
      s.dataset.kept = c;
      s.style.background = c ? `rgba(9,105,218,${(0.08 + 0.62 * c / n).toFixed(3)})` : "";
    }
  }
  function shadeCompare() {
    const k0 = kFor(0), k1 = kFor(1), a = retention(0, k0), b = retention(1, k1);
    const na = pairs(0), nb = pairs(1), upto = Math.min(evPos(0, k0), evPos(1, k1));
    for (let i = 0; i < N; i++) {
      const s = spans[i];
      if (i > upto) { s.classList.add("future"); s.style.background = ""; s.dataset.kept = -1; continue; }
      s.classList.remove("future");
      const x = a.total[i] / na, y = b.total[i] / nb, d = x - y;
      s.dataset.kept = a.total[i];
      s.dataset.keptB = b.total[i];
      if (Math.abs(d) < 0.02) s.style.background = x > 0 ? `rgba(110,119,129,${(0.08 + 0.4 * x).toFixed(3)})` : "";
      else if (d > 0) s.style.background = `rgba(9,105,218,${(0.15 + 0.7 * d).toFixed(3)})`;
      else s.style.background = `rgba(218,100,9,${(0.15 - 0.7 * d).toFixed(3)})`;
    }
  }
  function legend() {
    if (st.view === "compare")
      $("legend").innerHTML = `<span class="sw" style="background:rgba(9,105,218,.7)"></span>${esc(P[0].policy)} keeps more (layer, head) pairs` +
        `<span class="sw" style="background:rgba(218,100,9,.7)"></span>${esc(P[1].policy)} keeps more` +
        `<span class="sw" style="background:rgba(110,119,129,.4)"></span>both alike (darker: held by more)<span class="sw"></span>evicted everywhere by both`;
    else
      $("legend").innerHTML = `share of the ${pairs(st.pi)} (layer, KV head) pairs holding each token after the event:` +
        `<span class="sw"></span>none<span class="sw" style="background:rgba(9,105,218,.39)"></span>half<span class="sw" style="background:rgba(9,105,218,.7)"></span>all` +
        ` · grey text: not yet written · dotted: prompt`;
  }

  // ---- heatmap ------------------------------------------------------------------------
  function heatmap() {
    const c = $("heatmap"), pi = st.view === "compare" ? 0 : st.pi, k = kFor(pi);
    const pol = P[pi], L = pol.n_layers, H = pol.n_kv_heads, r = retention(pi, k), upto = evPos(pi, k);
    const W = Math.max(1, Math.min(N, 2000));
    c.width = W; c.height = L * 8;
    const g = c.getContext("2d"), img = g.createImageData(W, L * 8);
    const other = st.view === "compare" ? retention(1, kFor(1)) : null;
    for (let l = 0; l < L; l++)
      for (let x = 0; x < W; x++) {
        const p0 = Math.floor((x * N) / W), p1 = Math.max(p0 + 1, Math.floor(((x + 1) * N) / W));
        let s = 0, s2 = 0, n = 0;
        for (let p = p0; p < p1 && p <= upto; p++) { s += r.layer[l * N + p]; if (other) s2 += other.layer[l * N + p]; n++; }
        let rgb;
        if (!n) rgb = [246, 248, 250];
        else if (other) {
          const d = (s - s2) / (n * H), v = Math.min(1, Math.abs(d) * 2);
          rgb = d >= 0 ? [255 - 246 * v, 255 - 150 * v, 255 - 37 * v] : [255 - 37 * v, 255 - 155 * v, 255 - 246 * v];
        } else {
          const v = s / (n * H);
          rgb = [255 - 246 * v, 255 - 150 * v, 255 - 37 * v];
        }
        for (let y = 0; y < 8; y++) {
          const o = ((l * 8 + y) * W + x) * 4;
          img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
        }
      }
    g.putImageData(img, 0, 0);
    c.onclick = (e) => {
      const b = c.getBoundingClientRect();
      select(Math.min(N - 1, Math.floor(((e.clientX - b.left) / b.width) * N)));
    };
  }

  // ---- KL chart -----------------------------------------------------------------------
  function klChart() {
    const c = $("klchart"), W = Math.max(200, Math.round(c.clientWidth || 1000)), Hh = 160;
    c.width = W; c.height = Hh;
    const g = c.getContext("2d");
    g.clearRect(0, 0, W, Hh);
    const shown = st.view === "compare" ? [0, 1] : [st.pi];
    const colors = ["#0969da", "#da6409"];
    const series = shown.map((pi) => {
      const out = new Float32Array(W);
      for (let x = 0; x < W; x++) {
        const p0 = Math.floor((x * N) / W), p1 = Math.max(p0 + 1, Math.floor(((x + 1) * N) / W));
        let s = 0, n = 0;
        for (let p = p0; p < p1; p++) if (P[pi].kl[p] !== null) { s += P[pi].kl[p]; n++; }
        out[x] = n ? s / n : NaN;
      }
      return out;
    });
    const all = series.flatMap((s) => Array.from(s).filter((v) => !Number.isNaN(v))).sort((a, b) => a - b);
    const top = Math.max(1e-6, all.length ? all[Math.floor(0.99 * (all.length - 1))] : 1);
    series.forEach((s, j) => {
      g.strokeStyle = colors[j]; g.lineWidth = 1; g.beginPath();
      let pen = false;
      for (let x = 0; x < W; x++) {
        if (Number.isNaN(s[x])) { pen = false; continue; }
        const y = Hh - 2 - Math.min(1, s[x] / top) * (Hh - 14);
        if (pen) g.lineTo(x, y); else g.moveTo(x, y);
        pen = true;
      }
      g.stroke();
      g.fillStyle = colors[j]; g.font = "11px sans-serif";
      g.fillText(P[shown[j]].policy, 6 + 60 * j, 11);
    });
    g.fillStyle = "#57606a"; g.fillText(`top of scale ${fmt(top, 2)} nats`, W - 150, 11);
    const at = (evPos(shown[0], kFor(shown[0])) / N) * W;
    g.strokeStyle = "#cf222e"; g.beginPath(); g.moveTo(at, 0); g.lineTo(at, Hh); g.stroke();
    if (st.sel !== null) {
      const x = (st.sel / N) * W;
      g.strokeStyle = "#8250df"; g.setLineDash([3, 3]); g.beginPath(); g.moveTo(x, 0); g.lineTo(x, Hh); g.stroke(); g.setLineDash([]);
    }
    c.onclick = (e) => {
      const b = c.getBoundingClientRect();
      select(Math.min(N - 1, Math.floor(((e.clientX - b.left) / b.width) * N)));
    };
  }

  // ---- token detail -------------------------------------------------------------------
  function tokenEvents(pi, p) {
    const pol = P[pi], rows = [];
    pol.events.forEach((ev, k) => {
      if (p > ev.position) return;
      let cand = 0, held = 0, imp = 0, red = 0, ni = 0, nr = 0;
      const by = new Map(), sc = scores(pi, k);
      eventHeads(pi, k).forEach((h, i) => {
        const slot = lowerBound(h.res, p);
        if (h.res[slot] !== p) return;
        const { imp: hi, red: hr, by: hb } = sc[i];
        cand++;
        const kept = (h.mask[slot >> 3] >> (slot & 7)) & 1;
        if (kept) held++;
        if (hi && slot < hi.length) { imp += hi[slot]; ni++; }
        if (hr && slot < hr.length) { red += hr[slot]; nr++; }
        if (!kept && hb) {
          const r = hb[slot - lowerBound(h.kept, p)];
          if (r >= 0) by.set(r, (by.get(r) || 0) + 1);
        }
      });
      if (!cand) return;
      let best = -1, bestN = 0;
      for (const [r, n] of by) if (n > bestN) { best = r; bestN = n; }
      rows.push({ k, cand, held, imp: ni ? imp / ni : null, red: nr ? red / nr : null, by: best, byN: bestN });
    });
    return rows;
  }
  function detail() {
    const el = $("detail"), p = st.sel;
    if (p === null) return;
    let h = `<b>position ${p}</b> <code>${esc(show(D.tokens[p]))}</code>${p < D.prompt_tokens ? " (prompt)" : ""}<br>`;
    const list = st.view === "compare" ? [0, 1] : [st.pi];
    for (const pi of list) {
      const pol = P[pi], k = kFor(pi), r = retention(pi, k), L = pol.n_layers, H = pol.n_kv_heads;
      h += `<h3>${esc(pol.policy)} · budget ${pol.budget}</h3>`;
      h += `KL to FullKV at this token: ${fmt(pol.kl[p], 3)}<br>`;
      if (p > evPos(pi, k)) h += "not yet written at this event<br>";
      else {
        h += `after event ${k + 1}: held by ${r.total[p]} of ${L * H} (layer, head) pairs; per layer (0 left):<div class="bars">`;
        for (let l = 0; l < L; l++) h += `<div title="layer ${l}: ${r.layer[l * N + p]}/${H}" style="height:${(100 * r.layer[l * N + p]) / H}%"></div>`;
        h += "</div>";
      }
      const rows = tokenEvents(pi, p);
      if (rows.length) {
        h += "<table><tr><th>event</th><th>kept by</th><th>importance</th><th>redundancy</th><th>made redundant by</th></tr>";
        for (const x of rows)
          h += `<tr><td>${x.k + 1}${x.k === k ? " ◀" : ""}</td><td>${x.held}/${x.cand}</td><td>${fmt(x.imp)}</td><td>${fmt(x.red)}</td><td>${x.by >= 0 ? `<a data-go="${x.by}">@${x.by} <code>${esc(show(D.tokens[x.by] || ""))}</code></a> (${x.byN} heads)` : ""}</td></tr>`;
        h += "</table><span class='hint'>scores: means over the heads where the token was a candidate</span>";
      } else h += "<span class='hint'>no compression event saw this token</span>";
    }
    el.innerHTML = h;
    el.querySelectorAll("a[data-go]").forEach((a) => (a.onclick = () => select(+a.dataset.go)));
  }
  function select(p) {
    if (st.sel !== null) spans[st.sel].classList.remove("sel");
    st.sel = p;
    spans[p].classList.add("sel");
    spans[p].scrollIntoView({ block: "nearest" });
    detail();
    klChart();
    fragment();
  }

  // ---- near-duplicate groups ----------------------------------------------------------
  // Tokens evicted mainly for redundancy: evicted although their importance alone would
  // have kept them (at least the head's (B - w)-th largest), with a newer similar key.
  function dupGroups(pi) {
    return memo("dup" + pi, () => {
      const pol = P[pi], keepN = pol.budget - pol.window, votes = new Map();
      pol.events.forEach((ev, k) => {
        const sc = scores(pi, k);
        eventHeads(pi, k).forEach((h, i) => {
          const { imp, by } = sc[i];
          if (!by || !imp) return;
          const sorted = Float32Array.from(imp).sort();
          const cut = sorted[Math.max(0, sorted.length - keepN)];
          let e = 0;
          for (let slot = 0; slot < h.res.length; slot++) {
            if ((h.mask[slot >> 3] >> (slot & 7)) & 1) continue;
            const p = h.res[slot], r = by[e++];
            if (r < 0 || slot >= imp.length || imp[slot] < cut) continue;
            let m = votes.get(p);
            if (!m) votes.set(p, (m = new Map()));
            m.set(r, (m.get(r) || 0) + 1);
          }
        });
      });
      const groups = new Map();
      for (const [p, m] of votes) {
        let best = -1, n = 0;
        for (const [r, c] of m) if (c > n) { best = r; n = c; }
        if (!groups.has(best)) groups.set(best, []);
        groups.get(best).push([p, n]);
      }
      return Array.from(groups, ([r, ms]) => ({ r, ms: ms.sort((a, b) => a[0] - b[0]) })).sort((a, b) => b.ms.length - a.ms.length);
    });
  }
  function ctx(p, cls) {
    const a = Math.max(0, p - 4), b = Math.min(N, p + 5);
    let s = "";
    for (let i = a; i < b; i++) s += i === p ? `<a class="${cls}" data-go="${i}">${esc(D.tokens[i])}</a>` : esc(D.tokens[i]);
    return s.replace(/\n/g, "↵");
  }
  function dups() {
    const pi = st.view === "compare" ? 0 : st.pi, el = $("dups");
    if (!P[pi].events.some((e) => e.n_by)) {
      $("dup-section").style.display = "none";
      return;
    }
    $("dup-section").style.display = "";
    const gs = dupGroups(pi), shown = gs.slice(0, 40);
    $("dup-sub").textContent = `${esc(P[pi].policy)}: tokens evicted although their importance would have kept them, beside the newer token whose key made them redundant (${gs.length} groups, largest first)`;
    el.innerHTML = shown.map((g) =>
      `<div class="dup"><span class="n">${g.ms.length}× </span>${ctx(g.r, "kept")} <span class="n">⟸</span> ` +
      g.ms.slice(0, 8).map(([p, n]) => `${ctx(p, "gone")}<span class="n">(${n})</span>`).join(" · ") +
      (g.ms.length > 8 ? ` <span class="n">+${g.ms.length - 8}</span>` : "") + "</div>").join("");
    el.querySelectorAll("a[data-go]").forEach((a) => (a.onclick = () => select(+a.dataset.go)));
  }

  // ---- stepping -----------------------------------------------------------------------
  function fragment() {
    const f = `#policy=${st.pi}&event=${st.k}` + (st.view === "compare" ? "&view=compare" : "") + (st.sel !== null ? `&token=${st.sel}` : "");
    if (location.hash !== f) history.replaceState(null, "", f);
  }
  function render() {
    const pi = st.view === "compare" ? 0 : st.pi, E = P.length ? P[pi].events.length : 0;
    st.k = E ? Math.max(0, Math.min(st.k, E - 1)) : -1;
    const s = $("stepper");
    s.max = Math.max(0, E - 1); s.value = Math.max(0, st.k);
    const ev = st.k >= 0 ? P[pi].events[st.k] : null;
    $("state").textContent = ev
      ? `event ${st.k + 1} of ${E}: at position ${ev.position}, ${ev.slots_before} slots per (layer, head) down to ${P[pi].budget}`
      : "no compression event";
    $("state").dataset.policy = P.length ? P[pi].policy : "";
    $("state").dataset.event = st.k;
    $("state").dataset.events = E;
    $("state").dataset.view = st.view;
    if (P.length) {
      if (st.view === "compare") shadeCompare(); else shadeSingle();
      legend(); heatmap(); klChart();
      // The groups read every event: after the first paint.
      setTimeout(() => { dups(); document.body.dataset.dupsMs = Math.round(performance.now()); }, 0);
      if (st.sel !== null) { spans[st.sel].classList.add("sel"); detail(); }
    }
    $("kl-section").style.display = P.length ? "" : "none";
    fragment();
  }
  const step = (d) => { st.k += d; render(); };
  $("prev").onclick = () => step(-1);
  $("next").onclick = () => step(1);
  $("stepper").oninput = (e) => { st.k = +e.target.value; render(); };
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "SELECT" || e.target.tagName === "INPUT") return;
    if (e.key === "ArrowLeft") step(-1);
    if (e.key === "ArrowRight") step(1);
  });
  window.addEventListener("hashchange", () => {
    const f = new URLSearchParams(location.hash.slice(1)), k = parseInt(f.get("event"), 10);
    if (k >= 0 && k !== st.k) { st.k = k; render(); }
  });
  render();
  document.body.dataset.renderMs = Math.round(performance.now());
})();
