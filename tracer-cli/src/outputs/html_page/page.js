// Hover and zoom for the charts of a cudatrace HTML report. Each chart's
// data is in a JSON script beside it: each bin's start (s) and the series'
// values per bin; a bin is drawn at its start, in proportion to its time
// (the bins are finer over a process's steps). A chart opens on its
// process's steps, or else on the span from its first memory event (the
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
    const to = chart.querySelector(".axis .to");
    const toText = to.textContent;
    const back = chart.dataset.opensOn === "steps" ? "back to the steps" : "from the first memory event";
    const whole = chart.querySelector("button.whole");
    const last = data.times.length - 1;
    // Seconds since the trace's start at `x` across the plot.
    function secondsAt(x) { return data.times[last] * x / data.width; }
    // A moment in seconds, with as many decimals as the view's span needs
    // (steps of microseconds are told apart).
    function timeText(seconds) {
      const span = Math.max(secondsAt(view[2]), 1e-9);
      const decimals = Math.min(9, Math.max(3, 3 - Math.floor(Math.log10(span))));
      return seconds.toFixed(decimals) + " s";
    }
    let view = initial.slice();
    let dragFrom = null;
    function show(next) {
      view = next.slice();
      svg.setAttribute("viewBox", view.join(" "));
      const opening = view[0] === initial[0] && view[2] === initial[2];
      from.textContent = opening ? fromText : timeText(secondsAt(view[0]));
      const end = view[0] + view[2] >= data.width - 1e-6;
      to.textContent = opening ? toText : timeText(secondsAt(view[0] + view[2])) + (end ? " (the bar on the right: the end)" : "");
      if (whole) whole.textContent = view[0] === 0 && view[2] === data.width ? back : "show the whole run";
    }
    chart.dataset.seriesCount = String(svg.querySelectorAll("path.series").length);
    // The bin drawn nearest `clientX`: the bins' starts are in time order.
    function xToBin(clientX) {
      const box = svg.getBoundingClientRect();
      const seconds = secondsAt(view[0] + (clientX - box.left) / box.width * view[2]);
      let low = 0, high = last;
      while (low < high) {
        const middle = (low + high + 1) >> 1;
        if (data.times[middle] <= seconds) low = middle; else high = middle - 1;
      }
      if (low < last && data.times[low + 1] - seconds < seconds - data.times[low]) low++;
      return low;
    }
    svg.addEventListener("mousemove", function (e) {
      const bin = xToBin(e.clientX);
      const lines = ["t = " + timeText(data.times[bin])];
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
