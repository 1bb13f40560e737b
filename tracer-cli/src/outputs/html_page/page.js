// Hover and zoom for the charts of a cudatrace HTML report. Each chart's
// data is in a JSON script beside it: times (s), series values per bin.
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
    let view = full.slice();
    let dragFrom = null;
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
      view = [a, 0, b - a, data.height];
      svg.setAttribute("viewBox", view.join(" "));
    });
    svg.addEventListener("dblclick", function () {
      view = full.slice();
      svg.setAttribute("viewBox", view.join(" "));
    });
  });
  document.body.dataset.ready = "1";
})();
