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

  // Every message is applied here rather than by the extension, so that nothing the
  // page expects raises an htmx error: fragments whose element the page has are swapped
  // out of band by htmx; a new item, stage, agent or row (its element is missing) is
  // appended where its data-upsert-into says; a fragment with no target and no place
  // (a chunk for an item that has since completed) is dropped on purpose.
  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var message = event.detail && event.detail.message;
    if (typeof message !== "string" || message.charAt(0) !== "<") { return; }
    event.preventDefault();
    var parsed = document.createElement("template");
    parsed.innerHTML = message;
    var swapped = [];
    Array.from(parsed.content.children).forEach(function (element) {
      if (element.id === "live-reload") { window.location.reload(); return; }
      if (element.tagName === "TEMPLATE") {
        // A table row travels in a <template> (the HTML parser drops a bare <tr> after
        // other elements): replace the row the page has, or upsert it.
        Array.from(element.content.children).forEach(function (child) {
          var existing = child.id && document.getElementById(child.id);
          if (existing) {
            child.removeAttribute("hx-swap-oob");
            existing.replaceWith(child); htmx.process(child);
          } else { upsert(child); }
        });
        return;
      }
      if (hasTarget(element)) { swapped.push(element.outerHTML); return; }
      upsert(element);
    });
    if (swapped.length) {
      htmx.swap(document.body, swapped.join(""), { swapStyle: "none", swapDelay: 0, settleDelay: 0 });
    }
    document.dispatchEvent(new CustomEvent("tarsy:live-applied"));
  });

  function hasTarget(element) {
    var oob = element.getAttribute("hx-swap-oob") || "true";
    var colon = oob.indexOf(":");
    if (colon > 0) { return !!document.querySelector(oob.substring(colon + 1)); }
    return !!(element.id && document.getElementById(element.id));
  }

  function upsert(element) {
    var into = element.getAttribute("data-upsert-into");
    var container = into && document.querySelector(into);
    if (!container) { return; }
    element.removeAttribute("hx-swap-oob");
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
    // A running session's wall-time budget meter moves with the clock, not only with calls.
    document.querySelectorAll("meter[data-since][data-limit]").forEach(function (meter) {
      var since = Date.parse(meter.getAttribute("data-since"));
      var limit = parseFloat(meter.getAttribute("data-limit"));
      if (isNaN(since) || !(limit > 0)) { return; }
      var seconds = Math.max(0, (now - since) / 1000);
      meter.value = Math.min(100, Math.floor(seconds * 100 / limit));
      var figures = meter.parentNode.querySelector(".budget-figures");
      if (figures) {
        figures.textContent = Math.round(seconds).toLocaleString("en-US") + " s of " +
          Math.round(limit).toLocaleString("en-US") + " s";
      }
      meter.parentNode.classList.toggle("reached", seconds >= limit);
    });
  }, 1000);

  // The list's custom time range shows its two inputs only when chosen.
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "f-range") {
      var custom = document.querySelector(".custom-range");
      if (custom) { custom.hidden = event.target.value !== "custom"; }
    }
  });

  // Copy buttons: data-copy names the element whose text is copied; data-copy-link is a
  // share link's query (?stage=…&event=…), copied as an absolute URL of this page.
  document.addEventListener("click", function (event) {
    var button = event.target.closest &&
      event.target.closest("button.copy[data-copy], button.copy[data-copy-link]");
    if (!button) { return; }
    var text;
    if (button.hasAttribute("data-copy-link")) {
      text = window.location.origin + window.location.pathname + button.getAttribute("data-copy-link");
    } else {
      var source = document.querySelector(button.getAttribute("data-copy"));
      if (!source) { return; }
      text = source.innerText;
    }
    var label = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", label);
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else {  // plain http on another host: the old way still works
      fallbackCopy(text); done();
    }
  });

  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text; document.body.appendChild(area); area.select();
    document.execCommand("copy"); area.remove();
  }

  // Deep links: #item-N (the session page), #llm-N and #mcp-N (the trace) open what hides
  // the element, then scroll to it. The trace also takes ?stage=<id> and
  // ?interaction=llm-N|mcp-N (its "Link" buttons), which focus and highlight it too; the
  // session page's ?stage=&event= links are session.js's.
  function unfold(target, inner) {
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (inner) { target.querySelectorAll("details").forEach(function (d) { d.open = true; }); }
  }

  function revealTarget() {
    if (!/^#(item|llm|mcp)-\d+$/.test(window.location.hash)) { return; }
    var item = document.querySelector(window.location.hash);
    if (!item) { return; }
    unfold(item, item.classList.contains("item"));
    item.scrollIntoView({ block: "start" });
  }

  function traceLink() {
    if (!document.getElementById("trace")) { return; }
    var params = new URLSearchParams(window.location.search);
    var interaction = params.get("interaction") || "", stage = params.get("stage") || "";
    var target = null;
    if (/^(llm|mcp)-\d+$/.test(interaction)) { target = document.getElementById(interaction); }
    if (!target && /^\d+$/.test(stage)) { target = document.getElementById("trace-stage-" + stage); }
    if (!target) { return; }  // not this session's, or not an id: the page opens as usual
    unfold(target, false);
    target.setAttribute("tabindex", "-1");
    target.classList.add("deep-linked");
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  window.addEventListener("hashchange", revealTarget);
  document.addEventListener("DOMContentLoaded", function () { revealTarget(); traceLink(); });
})();
