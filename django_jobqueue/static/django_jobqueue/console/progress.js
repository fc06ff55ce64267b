// Progress bars of running jobs (docs/console.md "Progress"): every 2 s, ask the
// console's progress view for the jobs whose bars are on the page and update them in
// place; a job no longer running shows its state and its bar stops being polled.
(function () {
  "use strict";
  var POLL_MS = 2000;

  function bars() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-jq-progress]"));
  }

  function show(bar, job) {
    var meter = bar.querySelector("progress");
    var text = bar.querySelector(".jq-progress-text");
    var p = job.progress;
    if (job.status !== "processing") {
      bar.removeAttribute("data-jq-progress");
      if (meter) { meter.remove(); }
      text.textContent = job.state;
      var row = bar.closest("tr");
      if (row) { row.setAttribute("data-status", job.status); }
      return;
    }
    if (!p) { return; }
    if (p.total) {
      meter.max = p.total;
      meter.value = p.done;
    }
    text.textContent = p.done + (p.total ? "/" + p.total : "") + (p.message ? " " + p.message : "");
  }

  function poll() {
    var current = bars();
    if (!current.length) { return; }
    var url = current[0].getAttribute("data-jq-progress-url");
    var query = current.map(function (bar) {
      return "jid=" + encodeURIComponent(bar.getAttribute("data-jq-progress"));
    }).join("&");
    fetch(url + "?" + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        current.forEach(function (bar) {
          var job = body.jobs[bar.getAttribute("data-jq-progress")];
          if (job) { show(bar, job); }
        });
      })
      .catch(function () { /* the next poll tries again */ });
  }

  function start() {
    if (!bars().length) { return; }
    window.setInterval(poll, POLL_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
