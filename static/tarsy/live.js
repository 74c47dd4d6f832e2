// Glue between htmx's WebSocket extension and TARSy's live protocol:
// subscribe with the last event id this page has seen (so a reconnect catches up
// without gaps or duplicates), upsert new items, and reload when told to.
(function () {
  "use strict";

  function lastEventId() {
    var cursor = document.getElementById("live-cursor");
    return cursor ? parseInt(cursor.getAttribute("data-last-event-id") || "0", 10) : 0;
  }

  function setState(text) {
    var el = document.getElementById("live-state");
    if (el) { el.textContent = text; el.setAttribute("data-state", text); }
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    event.detail.socketWrapper.send(
      JSON.stringify({ action: "subscribe", last_event_id: lastEventId() })
    );
    setState("live");
  });

  document.addEventListener("htmx:wsClose", function (event) {
    // 4401: the login behind this socket ended (logout, deactivation); the reload lands
    // on the login page instead of reconnecting for ever.
    var closed = event.detail && event.detail.event;
    if (closed && closed.code === 4401) { window.location.reload(); return; }
    setState("reconnecting…");
  });

  // An out-of-band fragment whose target is missing is a new item: append it where it
  // says it belongs. Fragments without data-upsert-into (e.g. a chunk for an item that
  // has already completed) are dropped on purpose.
  document.addEventListener("htmx:oobErrorNoTarget", function (event) {
    var element = event.detail.content;
    if (!element || !element.getAttribute) { return; }
    if (element.id === "live-reload") { window.location.reload(); return; }
    if (element.tagName === "TEMPLATE") {
      // A table row travels in a <template> (the HTML parser drops a bare <tr> after
      // other elements): replace the row the page has, or upsert it.
      Array.from(element.content.children).forEach(function (child) {
        var existing = child.id && document.getElementById(child.id);
        if (existing) { existing.replaceWith(child); htmx.process(child); } else { upsert(child); }
      });
      return;
    }
    upsert(element);
  });

  function upsert(element) {
    var into = element.getAttribute("data-upsert-into");
    var container = into && document.querySelector(into);
    if (!container) { return; }
    if (element.getAttribute("data-upsert-position") === "afterbegin") {
      container.prepend(element);
    } else {
      container.append(element);
    }
    var empty = document.getElementById("no-sessions");
    if (empty) { empty.remove(); }
    htmx.process(element);
  }

  // Elapsed times (running and queued sessions, a running session's header) tick here;
  // the server renders the same text, so a page without this script is only less alive.
  function formatDuration(seconds) {
    if (seconds < 60) { return seconds.toFixed(1) + " s"; }
    var minutes = Math.floor(seconds / 60), secs = Math.floor(seconds % 60);
    if (minutes < 60) { return minutes + " min " + (secs < 10 ? "0" : "") + secs + " s"; }
    var hours = Math.floor(minutes / 60); minutes = minutes % 60;
    return hours + " h " + (minutes < 10 ? "0" : "") + minutes + " min";
  }
  setInterval(function () {
    var now = Date.now();
    document.querySelectorAll(".elapsed[data-since]").forEach(function (el) {
      var since = Date.parse(el.getAttribute("data-since"));
      if (!isNaN(since)) { el.textContent = formatDuration(Math.max(0, (now - since) / 1000)); }
    });
  }, 1000);

  // The list's custom time range shows its two inputs only when chosen.
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "f-range") {
      var custom = document.querySelector(".custom-range");
      if (custom) { custom.hidden = event.target.value !== "custom"; }
    }
  });

  // Copy buttons: data-copy names the element whose text is copied.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.copy[data-copy]");
    if (!button) { return; }
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) { return; }
    var text = source.innerText;
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else {  // plain http on another host: the old way still works
      var area = document.createElement("textarea");
      area.value = text; document.body.appendChild(area); area.select();
      document.execCommand("copy"); area.remove(); done();
    }
  });

  // Deep links (#item-N): open what hides the item, then scroll to it.
  function revealTarget() {
    if (!/^#item-\d+$/.test(window.location.hash)) { return; }
    var item = document.querySelector(window.location.hash);
    if (!item) { return; }
    for (var el = item; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    item.querySelectorAll("details").forEach(function (d) { d.open = true; });
    item.scrollIntoView({ block: "start" });
  }
  window.addEventListener("hashchange", revealTarget);
  document.addEventListener("DOMContentLoaded", revealTarget);
})();
