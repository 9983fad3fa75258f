// beatflow web UI: live updates of an in-progress run and task run (each polls its page's
// endpoint every 2 s for HTML drawn by the page's own template), log lines whole with a wrap toggle,
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
  // every 2 s, ask the page's poll (url) for JSON; apply(status) says whether to poll again
  function poll(url, apply) {
    var timer = setInterval(function () {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (status) {
          if (status && !apply(status)) { clearInterval(timer); }
        })
        .catch(function () { /* keep polling: the server may be restarting */ });
    }, 2000);
  }
  // a run: its state, duration, graph, and the task rows as the server draws them (the same
  // template as the page: every column, and a map's instances as they are created)
  function liveRun(el) {
    var lastRows = null;
    poll(el.getAttribute("data-live-run"), function (status) {
      var runState = document.getElementById("run-state");
      if (runState) { runState.replaceChildren(badge(status.state)); }
      var duration = document.getElementById("run-duration");
      if (duration) { duration.textContent = status.duration; }
      Object.keys(status.tasks).forEach(function (task) {
        document.querySelectorAll('#run-graph g.node[data-task="' + CSS.escape(task) + '"]').forEach(function (g) {
          g.setAttribute("class", "node state-" + status.tasks[task]);
        });
      });
      Object.keys(status.groups || {}).forEach(function (group) {
        document.querySelectorAll('#run-graph g.group-node[data-group="' + CSS.escape(group) + '"]').forEach(function (g) {
          g.setAttribute("class", "node group-node state-" + status.groups[group]);
        });
      });
      var rows = document.getElementById("task-rows");
      if (rows && lastRows !== status.rows) {
        rows.innerHTML = status.rows;
        lastRows = status.rows;
        showTimes(localTime);
      }
      var chart = document.getElementById("gantt");
      if (chart && status.gantt) { chart.innerHTML = status.gantt; }
      if (status.final) { window.location.reload(); return false; }
      return true;
    });
  }
  // log lines whole: wrapped in their box, or each on one line (scroll sideways); remembered
  var wrapLogs = true;
  function showWrap() {
    var logs = document.querySelector("pre#logs");
    if (logs) { logs.style.whiteSpace = wrapLogs ? "pre-wrap" : "pre"; logs.style.overflowWrap = wrapLogs ? "anywhere" : "normal"; }
    var button = document.getElementById("logs-wrap");
    if (button) {
      button.setAttribute("aria-pressed", wrapLogs ? "true" : "false");
      button.textContent = wrapLogs ? "wrap lines: on" : "wrap lines: off";
    }
  }
  function wrapToggle() {
    try { wrapLogs = window.localStorage.getItem("beatflow-wrap") !== "off"; } catch (e) { /* private mode */ }
    showWrap();
    document.addEventListener("click", function (e) {
      if (!e.target || e.target.id !== "logs-wrap") { return; }
      wrapLogs = !wrapLogs;
      try { window.localStorage.setItem("beatflow-wrap", wrapLogs ? "on" : "off"); } catch (err) { /* ignore */ }
      showWrap();
    });
  }
  // a task run: state, tries, error and the log tail, until it is final and its logs are in
  function liveTask(el) {
    var last = null, first = document.querySelector("pre#logs");
    if (first) { first.scrollTop = first.scrollHeight; }  // the tail
    poll(el.getAttribute("data-live-task"), function (status) {
      var changed = status.html !== last;
      // never under the hands of someone filling in a verb's form: wait until it is closed
      if (changed && el.querySelector("details[open]") === null) {
        var old = document.querySelector("pre#logs");
        var atEnd = !old || old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
        el.innerHTML = status.html;
        showTimes(localTime);
        showWrap();
        var logs = document.querySelector("pre#logs");
        if (logs && atEnd) { logs.scrollTop = logs.scrollHeight; }
        last = status.html;
      }
      // final: one more poll with nothing new (the worker writes logs a moment after the end)
      return !(status.final && !changed);
    });
  }
  // dates: written as UTC by the server; the header's toggle shows them in local time too
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localText(d, short) {
    if (short) { return pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" + pad(d.getMinutes()); }
    var off = -d.getTimezoneOffset(), sign = off < 0 ? "-" : "+";
    off = Math.abs(off);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) +
      " UTC" + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
  }
  var localTime = false;
  function showTimes(local) {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.hasAttribute("data-utc")) { el.setAttribute("data-utc", el.textContent); }
      var d = new Date(el.getAttribute("datetime"));
      var short = el.hasAttribute("data-short");
      el.textContent = local && !isNaN(d) ? localText(d, short) : el.getAttribute("data-utc");
      if (short && !el.hasAttribute("data-utc-title")) { el.setAttribute("data-utc-title", el.title); }
      if (short && !isNaN(d)) { el.title = local ? localText(d, false) : el.getAttribute("data-utc-title"); }
    });
    var button = document.getElementById("tz-toggle");
    if (button) { button.textContent = local ? "local time" : "UTC"; button.hidden = false; }
  }
  function timeZoneToggle() {
    try { localTime = window.localStorage.getItem("beatflow-time") === "local"; } catch (e) { /* private mode */ }
    showTimes(localTime);
    var button = document.getElementById("tz-toggle");
    if (!button) { return; }
    button.title = "show dates in UTC or in this browser's time zone";
    button.addEventListener("click", function () {
      localTime = !localTime;
      try { window.localStorage.setItem("beatflow-time", localTime ? "local" : "utc"); } catch (e) { /* ignore */ }
      showTimes(localTime);
    });
  }
  // a trigger form built from params: the browser's own check of a field (required, min, max,
  // pattern) shown next to it, as the server's errors are; cleared as the field is edited
  function paramErrors(form) {
    form.addEventListener("invalid", function (e) {
      var field = e.target.closest(".field");
      var slot = field && field.querySelector(".field-error");
      if (slot) { slot.textContent = e.target.validationMessage; field.classList.add("invalid"); }
    }, true);
    form.addEventListener("input", function (e) {
      var field = e.target.closest(".field");
      var slot = field && field.querySelector(".field-error");
      if (slot && e.target.checkValidity()) { slot.textContent = ""; field.classList.remove("invalid"); }
    });
  }
  // a graph fits its box's width; "actual size" shows it at its natural size (scroll the box)
  function graphZoom(button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var wrap = document.getElementById(button.getAttribute("data-graph"));
      if (!wrap) { return; }
      var natural = wrap.classList.toggle("natural");
      button.setAttribute("aria-pressed", natural ? "true" : "false");
      button.textContent = natural ? "fit to width" : "actual size";
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    timeZoneToggle();
    document.querySelectorAll("button.graph-zoom").forEach(graphZoom);
    document.querySelectorAll("form.trigger.params").forEach(paramErrors);
    wrapToggle();
    var run = document.querySelector("[data-live-run]");
    if (run) { liveRun(run); }
    var task = document.querySelector("[data-live-task]");
    if (task) { liveTask(task); }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  });
})();
