// The job page: polls /api/status once a second (no reload), draws the task table, the
// loss and examples/s charts (uPlot, vendored), the timeline and the root cause. When the
// server goes away (the launcher exited) it keeps the last state it saw.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const BASE_COLUMNS = ["task", "state", "phase", "pid", "step", "epoch", "loss", "ex/s", "cpu%", "rss MB", "restarts", "beat"];
  // after "rss MB" once a task holds a GPU (orchestrator/report/status.py: GPU_COLUMNS)
  const GPU_COLUMNS = ["gpus", "gpu%", "gpu MB"];
  let COLUMNS = BASE_COLUMNS;
  const LEFT = new Set(["task", "state", "phase"]);
  const COLORS = ["#3558c4", "#c62828", "#1f8a3d", "#e08b00", "#7b3fb5", "#00838f", "#6d4c41", "#ad1457"];
  const $ = (id) => document.getElementById(id);
  let since = 0, status = null, failures = 0, lastOk = 0, intervalMs = 1000, ended = false;
  const samples = [];   // {t, task, attempt, step, loss, examples_per_second}
  const events = [];    // {t, text, kind}
  const charts = {};

  const head = $("tasks").querySelector("thead tr");
  function renderHead() {
    while (head.cells.length) head.deleteCell(-1);
    for (const c of COLUMNS) {
      const th = document.createElement("th");
      th.textContent = c;
      if (LEFT.has(c)) th.className = "l";
      head.appendChild(th);
    }
  }
  renderHead();
  function useColumns(st) {
    const gpus = (st.tasks || []).some((t) => t.gpus);
    const wanted = gpus ? BASE_COLUMNS.slice(0, 10).concat(GPU_COLUMNS, BASE_COLUMNS.slice(10)) : BASE_COLUMNS;
    if (wanted.length === COLUMNS.length) return;
    COLUMNS = wanted;
    renderHead();
    const body = $("tasks").querySelector("tbody");
    while (body.rows.length) body.deleteRow(-1);
  }

  function fmt(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }

  // the same cells as the terminal's table (orchestrator/report/status.py: row)
  function row(t, live, parked) {
    const b = t.last_heartbeat, s = t.process_sample || {}, g = t.gpus || {};
    const terminal = ["Succeeded", "Failed", "Stopped"].includes(t.state);
    let state = terminal && (parked || []).includes(t.name || t.task.replace(":", "-")) ? "Parked" : t.state;
    if (terminal && t.exit) state += " (" + t.exit.replace("exit code ", "exit ") + ")";
    const cpu = b ? b.cpu_percent : s.cpu_percent, rss = b ? b.rss_bytes : s.rss_bytes;
    return {
      "task": t.name || t.task.replace(":", "-"), "state": state, "phase": !b ? "" : b.first_step_s != null ? b.phase + " (first step " + b.first_step_s.toFixed(0) + "s)" : b.phase,
      "pid": t.pid ? String(t.pid) : "-", "step": b && b.step != null ? String(b.step) : "-",
      "epoch": b && b.epoch != null ? String(b.epoch) : "-", "loss": fmt(b && b.loss, 4),
      "ex/s": fmt(b && b.examples_per_second, 0), "cpu%": fmt(cpu, 0), "rss MB": rss == null ? "-" : (rss / 1e6).toFixed(0),
      "restarts": String(t.restarts || 0),
      "beat": live && b && !terminal && t.heartbeat_age_s != null ? t.heartbeat_age_s.toFixed(1) + "s" : "-",
      "gpus": g.count ? String(g.count) : "-", "gpu%": fmt(g.utilization_percent, 0),
      "gpu MB": g.memory_used_bytes != null && g.memory_total_bytes
        ? (g.memory_used_bytes / 1e6).toFixed(0) + "/" + (g.memory_total_bytes / 1e6).toFixed(0) : "-",
    };
  }

  function renderHeader(st) {
    $("run").textContent = "run " + st.run_id;
    const badge = $("state");
    badge.textContent = st.status;
    badge.className = "badge s-" + st.status;
    const elapsed = runElapsed(st);
    const bits = [st.strategy, (st.tasks || []).length + " tasks", elapsed.toFixed(1) + " s"];
    if (st.global_batch_size) bits.push("global batch " + st.global_batch_size);
    if (st.elastic) bits.push("workers " + st.elastic.workers + " of " + st.elastic.min + ".." + st.elastic.max +
                              ((st.elastic.parked || []).length ? " (" + st.elastic.parked.join(", ") + " parked)" : ""));
    bits.push("restarts " + (st.restarts || 0) + "/" + st.max_restarts);
    const m = st.metrics || {};
    if (m.test_accuracy != null) bits.push("test accuracy " + m.test_accuracy.toFixed(4));
    if (!st.live && st.reason) bits.push(st.reason);
    $("facts").textContent = bits.join(" · ");
    document.title = st.status + " · " + st.run_id;
  }

  function renderTasks(st) {
    useColumns(st);
    const body = $("tasks").querySelector("tbody");
    const rows = (st.tasks || []).map((t) => [t, row(t, st.live, (st.elastic || {}).parked)]);
    while (body.rows.length > rows.length) body.deleteRow(-1);
    rows.forEach(([t, r], i) => {
      const tr = body.rows[i] || body.insertRow();
      tr.className = "t-" + t.state;
      tr.dataset.task = r.task;
      COLUMNS.forEach((c, j) => {
        const td = tr.cells[j] || tr.insertCell();
        td.className = (LEFT.has(c) ? "l " : "") + "c-" + c.replace(/[^a-z]/g, "");
        if (td.textContent !== r[c]) td.textContent = r[c];
      });
    });
  }

  function renderWarnings(st) {
    const items = st.warnings || [];
    $("warnings").hidden = !items.length;
    const list = $("warnings-list");
    if (list.childElementCount === items.length) return;
    list.textContent = "";
    items.forEach((w) => { const li = document.createElement("li"); li.textContent = w; list.appendChild(li); });
  }

  function renderCause(st) {
    const rc = st.root_cause;
    $("cause").hidden = !rc;
    if (!rc) return;
    const how = rc.exit_code != null ? "exit code " + rc.exit_code : "signal " + rc.signal;
    let text = rc.task + " (attempt " + rc.attempt + "): " + how + (rc.message ? ": " + rc.message : "");
    if (rc.likely_culprit) text += "; a consequence of a peer (" + rc.peer_error + "): likely culprit " + rc.likely_culprit;
    $("cause-text").textContent = text + " — log " + rc.log_path;
    $("cause-tail").textContent = rc.stderr_tail || "";
  }

  // seconds since the run's first life started in this process: a next life (a size change of the
  // running job) counts its elapsed_s from 0 and starts at life_started_s on the history's axis
  function runElapsed(st) {
    return (st.life_started_s || 0) + (st.elapsed_s != null ? st.elapsed_s : st.wall_time_s || 0);
  }

  // a vertical dashed line where each next life started (its "run ..., life N: continues" event)
  const lifeLines = {
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#7b3fb5";
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1;
        for (const e of events) {
          if (e.kind !== "life") continue;
          const x = u.valToPos(e.t, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };

  // one chart per measure: x = seconds since the start, one series per task
  function chartData(field) {
    const names = [...new Set(samples.filter((s) => s[field] != null).map((s) => s.task))].sort();
    const xs = [...new Set(samples.map((s) => s.t))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const ys = names.map(() => new Array(xs.length).fill(null));
    for (const s of samples) {
      const k = names.indexOf(s.task);
      if (k >= 0 && s[field] != null) ys[k][index.get(s.t)] = s[field];
    }
    return { names, data: [xs, ...ys] };
  }

  function renderChart(id, field, label) {
    const { names, data } = chartData(field);
    const el = $(id);
    const width = Math.max(320, Math.min(640, (document.body.clientWidth - 80) / 2));
    let c = charts[id];
    if (c && c.names.join() !== names.join()) { c.plot.destroy(); c = null; }
    if (!c) {
      el.textContent = "";
      const opts = {
        width, height: 240, legend: { live: false }, plugins: [lifeLines],
        scales: { x: { time: false } },
        axes: [{ label: "s" }, { label, size: 60 }],
        series: [{ label: "s" }, ...names.map((n, i) => ({ label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true, points: { show: false } }))],
      };
      c = charts[id] = { names, plot: new uPlot(opts, data, el) };
    } else {
      c.plot.setData(data);
    }
  }

  function renderTimeline(st) {
    const box = $("timeline");
    box.querySelectorAll(".mark, .span, .tick").forEach((e) => e.remove());
    // a finished run's page (status --web) has no life_started_s: its history.json may hold earlier lives
    const last = (xs) => (xs.length ? xs[xs.length - 1].t : 0);
    const end = Math.max(1, runElapsed(st), last(samples), last(events));
    const life = st.life_started_s || 0;  // the recoveries are this life's: their times count from its start
    const pos = (t) => Math.min(100, Math.max(0, (100 * t) / end)) + "%";
    for (const r of st.recoveries || []) {
      const span = document.createElement("div");
      span.className = "span";
      span.style.left = pos(life + r.detected_at_s);
      const stop = r.resumed_at_s != null ? life + r.resumed_at_s : end;
      span.style.width = Math.max(0.5, (100 * (stop - life - r.detected_at_s)) / end) + "%";
      span.title = r.scope + " restart of " + r.tasks.join(", ") + " after " + r.cause;
      box.appendChild(span);
    }
    for (const e of events) {
      if (e.kind === "task" || (e.kind === "job" && !/^job (Restarting|Succeeded|Failed|Interrupted)/.test(e.text))) continue;
      const m = document.createElement("div");
      m.className = "mark k-" + e.kind;
      m.style.left = pos(e.t);
      m.title = e.t.toFixed(1) + " s: " + e.text;
      box.appendChild(m);
    }
    for (let i = 0; i <= 4; i++) {
      const tick = document.createElement("div");
      tick.className = "tick";
      tick.style.left = (i * 24) + "%";
      tick.textContent = ((end * i) / 4).toFixed(0);
      box.appendChild(tick);
    }
    const ul = $("recoveries");
    ul.textContent = "";
    for (const r of st.recoveries || []) {
      const li = document.createElement("li");
      let text = r.detected_at_s.toFixed(1) + " s: " + r.scope + " restart of " + r.tasks.join(", ") + " after " + r.cause;
      if (r.detection_to_resumed_training_s != null) text += "; working again after " + r.detection_to_resumed_training_s.toFixed(1) + " s";
      if (r.resumed_from_step != null) text += ", resumed from step " + r.resumed_from_step;
      li.textContent = text;
      ul.appendChild(li);
    }
    const ol = $("events");
    ol.textContent = "";
    for (const e of events.slice(-200)) {
      const li = document.createElement("li");
      li.className = "k-" + e.kind;
      li.textContent = "[" + e.t.toFixed(1).padStart(6) + "s] " + e.text;
      ol.appendChild(li);
    }
    ol.scrollTop = ol.scrollHeight;
  }

  function render() {
    if (!status || !status.run_id) return;
    renderHeader(status);
    renderTasks(status);
    renderWarnings(status);
    renderCause(status);
    renderChart("chart-loss", "loss", "loss");
    renderChart("chart-eps", "examples_per_second", "examples/s");
    renderTimeline(status);
  }

  function setConn(text, lost) {
    const el = $("conn");
    el.textContent = text;
    el.className = "conn" + (lost ? " lost" : "");
  }

  async function poll() {
    try {
      const r = await fetch("/api/status?since=" + since, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
      if (r.status === 401) { setConn("refused: the token in this URL is wrong (use the URL the launcher printed)", true); return; }
      if (!r.ok) throw new Error("HTTP " + r.status);
      const st = await r.json();
      intervalMs = 1000 * (st.poll_interval_s || 1);
      const h = st.history;
      if (h) {
        for (const s of h.samples) samples.push(s);
        for (const e of h.events) events.push(e);
        if (samples.length > 30000) samples.splice(0, samples.length - 30000);
        since = h.seq;
      }
      status = st;
      failures = 0;
      lastOk = Date.now();
      ended = !st.live;
      render();
      setConn(ended ? "the job has ended: this is its final state" : "live · updated " + new Date().toLocaleTimeString(), false);
    } catch (err) {
      failures += 1;
      const when = lastOk ? " (last update " + new Date(lastOk).toLocaleTimeString() + ")" : "";
      setConn((ended ? "the job has ended and its orchestrator is gone: final state shown" :
        "the orchestrator does not answer: showing the last state seen") + when, !ended);
    }
    setTimeout(poll, failures ? Math.min(10000, intervalMs * (1 + failures)) : intervalMs);
  }
  poll();
})();
