// Hover and zoom for the charts of a cudatrace HTML report. Each chart's
// data is in a JSON script beside it: times (s), series values per bin.
// A chart opens on the span from its process's first memory event (the
// viewBox the page was written with); its button shows the whole run.
(function () {
  "use strict";
  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  document.querySelectorAll(".chart").forEach(function (chart) {
    const data = JSON.parse(chart.querySelector("script.data").textContent);
    const svg = chart.querySelector("svg.plot");
    const tip = chart.querySelector(".tip");
    const full = [0, 0, data.width, data.height];
    const initial = svg.getAttribute("viewBox").split(" ").map(Number);
    const from = chart.querySelector(".axis .from");
    const fromText = from.textContent;
    const whole = chart.querySelector("button.whole");
    let view = initial.slice();
    let dragFrom = null;
    function show(next) {
      view = next.slice();
      svg.setAttribute("viewBox", view.join(" "));
      const last = data.times.length - 1;
      const seconds = data.times[last] * view[0] / data.width;
      from.textContent = view[0] === initial[0] ? fromText : seconds.toFixed(3) + " s";
      if (whole) whole.textContent = view[0] === 0 && view[2] === data.width ? "from the first memory event" : "show the whole run";
    }
    chart.dataset.seriesCount = String(svg.querySelectorAll("path.series").length);
    function xToBin(clientX) {
      const box = svg.getBoundingClientRect();
      const x = view[0] + (clientX - box.left) / box.width * view[2];
      return Math.max(0, Math.min(data.times.length - 1, Math.round(x / data.width * (data.times.length - 1))));
    }
    svg.addEventListener("mousemove", function (e) {
      const bin = xToBin(e.clientX);
      const lines = ["t = " + data.times[bin].toFixed(3) + " s"];
      let total = 0;
      data.series.forEach(function (s) { total += s.values[bin]; });
      lines.push("total " + bytes(total));
      data.series.forEach(function (s) {
        if (s.values[bin] > 0) lines.push(bytes(s.values[bin]) + "  " + s.name);
      });
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      tip.style.left = (svg.offsetLeft + e.offsetX + 16) + "px";
      tip.style.top = (svg.offsetTop + e.offsetY + 16) + "px";
    });
    svg.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    svg.addEventListener("mousedown", function (e) { dragFrom = e.clientX; });
    svg.addEventListener("mouseup", function (e) {
      if (dragFrom === null) return;
      const box = svg.getBoundingClientRect();
      const a = view[0] + (Math.min(dragFrom, e.clientX) - box.left) / box.width * view[2];
      const b = view[0] + (Math.max(dragFrom, e.clientX) - box.left) / box.width * view[2];
      dragFrom = null;
      if (b - a < 2) return;
      show([a, 0, b - a, data.height]);
    });
    svg.addEventListener("dblclick", function () { show(initial); });
    if (whole) {
      whole.addEventListener("click", function () {
        show(view[0] === 0 && view[2] === data.width ? initial : full);
      });
    }
  });
  document.body.dataset.ready = "1";
})();
