// beatflow web UI: live updates of an in-progress run (polls a small JSON endpoint every 2 s),
// dates in UTC or local time, confirmations for destructive forms. No framework, no CDN.
(function () {
  "use strict";
  function badge(state) {
    var span = document.createElement("span");
    span.className = "badge state-" + state;
    span.setAttribute("data-state", "");
    span.textContent = state;
    return span;
  }
  function secs(v) { return v === null || v === undefined ? "–" : v.toFixed(2) + " s"; }
  function apply(status) {
    var runState = document.getElementById("run-state");
    if (runState) { runState.replaceChildren(badge(status.state)); }
    Object.keys(status.tasks).forEach(function (task) {
      document.querySelectorAll('#run-graph g.node[data-task="' + CSS.escape(task) + '"]').forEach(function (g) {
        g.setAttribute("class", "node state-" + status.tasks[task]);
      });
    });
    var rows = document.getElementById("task-rows");
    Object.keys(status.instances).forEach(function (label) {
      var info = status.instances[label];
      var row = rows && rows.querySelector('tr[data-instance="' + CSS.escape(label) + '"]');
      if (!row) { return; }
      row.querySelector(".st").replaceChildren(badge(info.state));
      row.querySelector(".try").textContent = info.try_number;
      row.querySelector(".dur").textContent = secs(info.duration_seconds);
    });
  }
  function poll(el) {
    var url = el.getAttribute("data-live-status");
    var timer = setInterval(function () {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (status) {
          if (!status) { return; }
          apply(status);
          if (status.final) { clearInterval(timer); window.location.reload(); }
        })
        .catch(function () { /* keep polling: the server may be restarting */ });
    }, 2000);
  }
  // dates: written as UTC by the server; the header's toggle shows them in local time too
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localText(d) {
    var off = -d.getTimezoneOffset(), sign = off < 0 ? "-" : "+";
    off = Math.abs(off);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) +
      " UTC" + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
  }
  function showTimes(local) {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.hasAttribute("data-utc")) { el.setAttribute("data-utc", el.textContent); }
      var d = new Date(el.getAttribute("datetime"));
      el.textContent = local && !isNaN(d) ? localText(d) : el.getAttribute("data-utc");
    });
    var button = document.getElementById("tz-toggle");
    if (button) { button.textContent = local ? "local time" : "UTC"; button.hidden = false; }
  }
  function timeZoneToggle() {
    var local = false;
    try { local = window.localStorage.getItem("beatflow-time") === "local"; } catch (e) { /* private mode */ }
    showTimes(local);
    var button = document.getElementById("tz-toggle");
    if (!button) { return; }
    button.title = "show dates in UTC or in this browser's time zone";
    button.addEventListener("click", function () {
      local = !local;
      try { window.localStorage.setItem("beatflow-time", local ? "local" : "utc"); } catch (e) { /* ignore */ }
      showTimes(local);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    timeZoneToggle();
    var live = document.querySelector("[data-live-status]");
    if (live) { poll(live); }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  });
})();
