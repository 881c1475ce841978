// mjsched dashboard: a little progressive enhancement; every page works without it.
(function () {
  "use strict";
  // Confirmation before each action (forms with data-confirm).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  // Live validation of the edit form: the next runs of the schedule being typed (a cron, an
  // interval or a one-off instant: the input's data-schedule names which).
  var edit = document.getElementById("edit-form");
  if (edit) {
    var out = document.getElementById("preview");
    var cron = edit.querySelector("[data-schedule]");
    var zone = document.getElementById("edit-timezone");
    var jitter = document.getElementById("edit-jitter");
    var timer = null, seq = 0;
    var show = function (body) {
      out.textContent = "";
      out.className = "preview" + (body.ok ? " good" : " bad");
      if (!body.ok) { out.textContent = body.error; return; }
      var head = document.createElement("div");
      head.textContent = "Runs " + body.words + ". Next:";
      out.appendChild(head);
      var list = document.createElement("ol");
      body.times.forEach(function (t) { var li = document.createElement("li"); li.textContent = t; list.appendChild(li); });
      out.appendChild(list);
    };
    var check = function () {
      var mine = ++seq;
      var url = edit.getAttribute("data-preview") + "?" + cron.getAttribute("data-schedule") + "=" +
                encodeURIComponent(cron.value) +
                "&timezone=" + encodeURIComponent(zone.value);
      fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (body) { if (mine === seq) { show(body); } })
        .catch(function () { /* the server checks again on save */ });
    };
    var later = function () { clearTimeout(timer); timer = setTimeout(check, 250); };
    cron.addEventListener("input", later);
    zone.addEventListener("input", later);
    if (jitter) { jitter.addEventListener("input", later); }
  }

  // Auto-refresh of the live pages (body data-refresh="seconds"), paused while the user
  // types or has a details element open.
  var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (every > 0) {
    setInterval(function () {
      var active = document.activeElement;
      if (active && (active.tagName === "INPUT" || active.tagName === "SELECT")) { return; }
      if (document.querySelector("details[open]")) { return; }
      fetch(window.location.href, { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) { return null; }
        return r.text();
      }).then(function (html) {
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content"), now = document.getElementById("content");
        if (fresh && now) {
          var flash = now.querySelector(".flash");
          now.innerHTML = fresh.innerHTML;
          if (flash && !now.querySelector(".flash")) { now.insertBefore(flash, now.firstChild); }
        }
      }).catch(function () {});
    }, every * 1000);
  }
})();
