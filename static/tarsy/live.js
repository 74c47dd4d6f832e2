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
  });
})();
