// Live charts of the manager's own /metrics: polls it every second, turns counters into rates
// and draws them as SVG polylines (no chart library, nothing fetched from elsewhere).
"use strict";
(function () {
  const WINDOW = 120; // points kept (2 minutes)
  const series = {
    requests: { color: "#4a90d9", points: [], label: "manager requests/s" },
    stored: { color: "#2e7d32", points: [], label: "cluster stored MiB/s (writes minus deletions)" },
  };
  let last = null;

  // Sums the samples of `name` (every label set) in an OpenMetrics text.
  function sum(text, name) {
    let total = 0;
    for (const line of text.split("\n")) {
      if (line.startsWith(name + " ") || line.startsWith(name + "{")) {
        const value = parseFloat(line.slice(line.lastIndexOf(" ") + 1));
        if (!isNaN(value)) total += value;
      }
    }
    return total;
  }

  function draw(svg) {
    const w = svg.clientWidth || 600, h = svg.clientHeight || 160;
    let max = 1;
    for (const s of Object.values(series)) for (const p of s.points) max = Math.max(max, p);
    let body = "";
    for (const s of Object.values(series)) {
      // The newest point at the right edge.
      const n = s.points.length;
      const pts = s.points.map((v, i) =>
        `${w - ((n - 1 - i) * w) / (WINDOW - 1)},${h - 4 - (v / max) * (h - 20)}`).join(" ");
      body += `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts}"/>`;
    }
    body += `<text x="4" y="12" font-size="11" fill="#555">max ${max.toFixed(2)}</text>`;
    svg.innerHTML = body;
  }

  async function tick() {
    const svg = document.getElementById("throughput");
    if (!svg) return;
    try {
      const text = await (await fetch("/metrics", { cache: "no-store" })).text();
      const now = {
        t: Date.now() / 1000,
        requests: sum(text, "tomus_rpc_requests_total"),
        stored: sum(text, "tomus_cluster_stored_bytes") / 1048576,
      };
      if (last) {
        const dt = Math.max(now.t - last.t, 0.001);
        for (const key of Object.keys(series)) {
          const s = series[key];
          s.points.push(Math.max(0, (now[key] - last[key]) / dt));
          if (s.points.length > WINDOW) s.points.shift();
        }
        const out = document.getElementById("rates");
        if (out) {
          out.textContent = Object.values(series)
            .map((s) => `${s.label}: ${s.points[s.points.length - 1].toFixed(2)}`).join("   ");
        }
        draw(svg);
      }
      last = now;
    } catch (e) {
      const out = document.getElementById("rates");
      if (out) out.textContent = "metrics unavailable: " + e;
    }
  }
  tick();
  setInterval(tick, 1000);
})();
