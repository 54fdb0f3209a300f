// The dashboard's pages, live: the server sends the page's live part as
// a server-sent event whenever what it shows changes (the model page's,
// after the first, only its rows that changed); the filter hides
// the rows that do not mention its text; "Resolved" and the action forms
// (approve, pause, run, ...) post with the session's CSRF token and say
// what the server answered.
(function () {
  "use strict";
  var model = document.getElementById("model");
  var live = document.getElementById("live");
  var notice = document.getElementById("notice");
  var filter = document.getElementById("filter");
  var csrf = document.body.dataset.csrf;

  function say(text) {
    notice.textContent = text;
    notice.hidden = !text;
  }

  function applyFilter() {
    if (!filter) { return; }
    var f = filter.value.trim().toLowerCase();
    model.querySelectorAll("tr[data-search]").forEach(function (tr) {
      tr.hidden = f !== "" && tr.dataset.search.indexOf(f) < 0;
    });
  }
  if (filter) {
    filter.addEventListener("input", applyFilter);
    filter.form.addEventListener("submit", function (e) { e.preventDefault(); applyFilter(); });
  }

  var es = new EventSource(document.body.dataset.stream);
  es.addEventListener("open", function () { live.textContent = "live"; });
  es.addEventListener("model", function (e) {
    // Keep open what the reader opened (hook output).
    var open = Array.prototype.map.call(model.querySelectorAll("details[open]"), function (d) { return d.textContent; });
    // And what the reader typed into the page's forms, and where.
    var typed = {};
    model.querySelectorAll("input[id]").forEach(function (i) { if (i.value) { typed[i.id] = i.value; } });
    var focused = document.activeElement && model.contains(document.activeElement) ? document.activeElement.id : "";
    model.innerHTML = e.data;
    model.querySelectorAll("details").forEach(function (d) { if (open.indexOf(d.textContent) >= 0) { d.open = true; } });
    Object.keys(typed).forEach(function (id) { var i = document.getElementById(id); if (i) { i.value = typed[id]; } });
    if (focused && document.getElementById(focused)) { document.getElementById(focused).focus(); }
    applyFilter();
    live.textContent = "live · revision " + e.lastEventId;
    document.body.dataset.revision = e.lastEventId;
  });
  // The model page's stream sends, after the whole page, only the rows
  // that changed: <template> elements (the summary; a row gone; a row
  // new or changed, with the key of the row it goes before), applied in
  // order, in place, so that the filter, the focus and the scroll hold.
  es.addEventListener("rows", function (e) {
    var patch = document.createElement("template");
    patch.innerHTML = e.data;
    var f = filter ? filter.value.trim().toLowerCase() : "";
    var byKey = function (body, key) { return key ? body.querySelector('tr[data-key="' + CSS.escape(key) + '"]') : null; };
    Array.prototype.forEach.call(patch.content.children, function (t) {
      if (t.hasAttribute("data-summary")) {
        var summary = model.querySelector("p.summary");
        if (summary) { summary.replaceWith(t.content.cloneNode(true)); }
        return;
      }
      var body = document.getElementById(t.dataset.table);
      if (!body) { return; }
      var old = byKey(body, t.dataset.key);
      var focused = old && old.contains(document.activeElement) ? document.activeElement.className : "";
      if (old) { old.remove(); }
      if (t.hasAttribute("data-gone")) { return; }
      var tr = t.content.firstElementChild;
      tr.hidden = f !== "" && tr.dataset.search.indexOf(f) < 0;
      body.insertBefore(tr, byKey(body, t.dataset.before));
      if (focused) {
        var again = tr.getElementsByClassName(focused)[0];
        if (again) { again.focus(); }
      }
    });
    live.textContent = "live · revision " + e.lastEventId;
    document.body.dataset.revision = e.lastEventId;
  });
  es.addEventListener("end", function (e) {
    es.close();
    live.textContent = "ended";
    document.body.dataset.ended = "1";
    say(e.data + ": run ctl dashboard to log in again.");
  });
  es.addEventListener("error", function () {
    if (es.readyState === EventSource.CLOSED) {
      live.textContent = "ended";
      document.body.dataset.ended = "1";
      say("The live view ended: reload the page, or run ctl dashboard to log in again.");
    } else {
      live.textContent = "reconnecting…";
    }
  });

  model.addEventListener("click", function (e) {
    var b = e.target.closest("button.resolve");
    if (!b) { return; }
    b.disabled = true;
    var unit = b.dataset.unit;
    fetch("/units/" + unit + "/resolved", {method: "POST", headers: {"X-CSRF-Token": csrf}, credentials: "same-origin"})
      .then(function (r) { return r.text().then(function (t) { return {ok: r.ok, status: r.status, text: t}; }); })
      .then(function (r) {
        say(r.ok ? r.text.trim() : "Refused (" + r.status + "): " + r.text.trim());
        b.disabled = false;
      });
  });
  // An action form posts in the background; the page stays, live, and
  // says what happened. The form still works without this script.
  document.addEventListener("submit", function (e) {
    var form = e.target.closest("form.act");
    if (!form) { return; }
    e.preventDefault();
    var b = form.querySelector("button");
    if (b) { b.disabled = true; }
    // getAttribute: a field named "action" hides the form's property.
    fetch(form.getAttribute("action"), {method: "POST", headers: {"X-CSRF-Token": csrf}, credentials: "same-origin",
      body: new URLSearchParams(new FormData(form))})
      .then(function (r) { return r.text().then(function (t) { return {ok: r.ok, status: r.status, text: t, next: r.headers.get("X-Dashboard-Next")}; }); })
      .then(function (r) {
        say(r.ok ? r.text.trim() : "Refused (" + r.status + "): " + r.text.trim());
        document.body.dataset.answered = r.ok ? "ok" : String(r.status);
        if (b) { b.disabled = false; }
        if (r.ok && r.next) { window.location.assign(r.next); }
      });
  });
  applyFilter();
})();
