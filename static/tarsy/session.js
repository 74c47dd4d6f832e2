// The session page: follow the newest step while it runs, find in the session, open a
// shared link (?stage=…&event=…) at its stage or item. live.js applies the socket's
// fragments and says so with a "tarsy:live-applied" event.
(function () {
  "use strict";
  var root = document.getElementById("live-root");
  var timeline = document.getElementById("timeline");
  var tools = document.getElementById("session-tools");
  if (!root || !timeline || !tools) { return; }
  tools.hidden = false;

  var RUNNING = { pending: 1, in_progress: 1, cancelling: 1 };
  function running() {
    var badge = document.getElementById("session-status");
    return !!(badge && RUNNING[badge.getAttribute("data-status")]);
  }
  function el(id) { return document.getElementById(id); }

  // ---- Deep links -------------------------------------------------------------------
  var wantStage = root.getAttribute("data-focus-stage") || "";
  var wantEvent = root.getAttribute("data-focus-event") || "";
  var linkDone = !wantStage && !wantEvent;

  function reveal(target) {
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") { node.open = true; }
    }
    if (target.classList.contains("item")) {
      target.querySelectorAll("details").forEach(function (d) { d.open = true; });
    }
  }

  function focusOn(target) {
    reveal(target);
    if (!target.hasAttribute("tabindex")) { target.setAttribute("tabindex", "-1"); }
    document.querySelectorAll(".deep-linked").forEach(function (x) { x.classList.remove("deep-linked"); });
    target.classList.add("deep-linked");
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  // An item that was streaming is replaced when it completes: the new element keeps
  // the highlight and, if the reader has not moved on, the focus.
  var linked = "";
  function keepLinked() {
    var item = linked && el(linked);
    if (!item || item.classList.contains("deep-linked")) { return; }
    item.classList.add("deep-linked");
    item.setAttribute("tabindex", "-1");
    if (!document.activeElement || document.activeElement === document.body) {
      item.focus({ preventScroll: true });
    }
  }

  // Runs on load and after each live update until the link's target has been focused.
  function followLink() {
    if (linkDone) { return; }
    var item = wantEvent && el("item-" + wantEvent);
    if (item) { linkDone = true; linked = item.id; focusOn(item); return; }
    if (wantEvent && running()) {
      // The item may still come: show its stage meanwhile, once.
      var waiting = wantStage && el("stage-" + wantStage);
      if (waiting && !waiting.classList.contains("deep-linked")) { focusOn(waiting); }
      return;
    }
    var stage = wantStage && el("stage-" + wantStage);
    if (stage) {
      linkDone = true;
      var first = stage.querySelector(".item:not(.task_assigned)");
      focusOn(first || stage);
      return;
    }
    if (!running()) { linkDone = true; }
  }

  // ---- Follow mode ------------------------------------------------------------------
  var following = running() && linkDone && !/^#item-\d+$/.test(window.location.hash);
  var newest = null;         // the item the last live update touched
  var ourScroll = null;      // where this script last scrolled to
  var lastY = window.scrollY;
  var intentAt = 0;          // when the reader last used wheel, keys, touch or pointer

  function newestItem() {
    if (newest && document.body.contains(newest)) { return newest; }
    var all = timeline.querySelectorAll("article.item");
    return all.length ? all[all.length - 1] : null;
  }

  function followNow() {
    var item = newestItem();
    if (!item) { return; }
    var rect = item.getBoundingClientRect();
    var top = tools.getBoundingClientRect().bottom;
    if (rect.bottom <= window.innerHeight && rect.top >= top) { return; }
    // Its end in view (where the text grows), above the bottom edge.
    var y = window.scrollY + rect.bottom - window.innerHeight + 24;
    ourScroll = Math.max(0, Math.round(y));
    window.scrollTo(0, ourScroll);
  }

  function setFollowing(on) {
    following = on;
    if (on) { followNow(); }
    updateControls();
  }

  function updateControls() {
    var live = running();
    if (!live) { following = false; }
    el("follow-state").hidden = !(live && following);
    el("jump-live").hidden = !(live && !following);
    var answer = el("session-answer");
    el("jump-answer").hidden = live || !answer || answer.hidden;
  }

  ["wheel", "touchstart", "touchmove", "mousedown", "keydown"].forEach(function (kind) {
    window.addEventListener(kind, function (event) {
      intentAt = Date.now();
      if (kind === "wheel" && event.deltaY < 0 && following) { setFollowing(false); }
      if (kind === "keydown" && following && /^(PageUp|ArrowUp|Home)$/.test(event.key) &&
          !/^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName)) { setFollowing(false); }
    }, { passive: true });
  });
  window.addEventListener("scroll", function () {
    var y = window.scrollY;
    var mine = ourScroll !== null && Math.abs(y - ourScroll) < 3;
    if (!mine && Date.now() - intentAt < 800 && running()) {
      if (following && y < lastY - 2) { setFollowing(false); }
      // Back down at the very end of the page: follow again.
      else if (!following && y > lastY &&
               y + window.innerHeight >= document.documentElement.scrollHeight - 4) { setFollowing(true); }
    }
    lastY = y;
  }, { passive: true });

  el("jump-live").addEventListener("click", function () {
    setFollowing(true);
  });
  el("jump-answer").addEventListener("click", function (event) {
    var answer = el("session-answer");
    if (!answer) { return; }
    event.preventDefault();
    answer.scrollIntoView({ block: "start" });
    answer.focus({ preventScroll: true });
  });

  // ---- Find in session --------------------------------------------------------------
  var input = el("find-input"), countEl = el("find-count");
  var prevButton = el("find-prev"), nextButton = el("find-next"), onlyBox = el("find-only");
  var texts = new Map();     // item -> its searchable text (lower case), made once
  var items = null;          // the items in page order; null: to be read again
  var matches = [], matchSet = new Set(), current = -1, query = "";
  var timer = null;
  var timings = [];

  function itemText(item) {
    var parts = [];
    var walker = document.createTreeWalker(item, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      var parent = node.parentElement;
      if (parent && parent.closest("button")) { continue; }  // "Copy", "Link"
      parts.push(node.nodeValue);
    }
    return parts.join(" ").replace(/\s+/g, " ").toLowerCase();
  }

  function textOf(item) {
    var text = texts.get(item);
    if (text === undefined) { text = itemText(item); texts.set(item, text); }
    return text;
  }

  function runFind() {
    var started = performance.now();
    query = input.value.trim().toLowerCase();
    if (items === null) { items = Array.from(timeline.querySelectorAll("article.item")); }
    var found = [];
    if (query) {
      for (var i = 0; i < items.length; i++) {
        if (textOf(items[i]).indexOf(query) !== -1) { found.push(items[i]); }
      }
    }
    // The current match stays current, even when its item was replaced (completed).
    var keep = current >= 0 ? matches[current].id : "";
    var foundSet = new Set(found);
    matchSet.forEach(function (item) { if (!foundSet.has(item)) { item.classList.remove("find-match", "find-current"); } });
    found.forEach(function (item) { if (!matchSet.has(item)) { item.classList.add("find-match"); } });
    matches = found; matchSet = foundSet;
    current = found.length ? 0 : -1;
    for (var k = 0; keep && k < found.length; k++) { if (found[k].id === keep) { current = k; break; } }
    timeline.classList.toggle("find-active", !!query);
    timeline.classList.toggle("find-only", !!query && onlyBox.checked);
    markCurrent(false);
    timings.push(performance.now() - started);
    return found.length;
  }

  function markCurrent(move) {
    document.querySelectorAll(".find-current").forEach(function (x) { x.classList.remove("find-current"); });
    var item = current >= 0 ? matches[current] : null;
    if (item) { item.classList.add("find-current"); }
    countEl.textContent = query ? (matches.length ? (current + 1) + " of " + matches.length : "no matches") : "";
    prevButton.disabled = nextButton.disabled = matches.length === 0;
    highlight(item);
    if (item && move) {
      item.querySelectorAll("details").forEach(function (d) {
        if (!d.open && d.textContent.toLowerCase().indexOf(query) !== -1) { d.open = true; }
      });
      reveal(item);
      if (following) { setFollowing(false); }
      item.scrollIntoView({ block: "center" });
    }
  }

  // The words themselves, in the current match (CSS Custom Highlight API; without it
  // the item's outline still shows where the match is).
  function highlight(item) {
    if (!window.CSS || !CSS.highlights || typeof Highlight === "undefined") { return; }
    CSS.highlights.delete("tarsy-find");
    if (!item || !query) { return; }
    var ranges = [];
    var walker = document.createTreeWalker(item, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node && ranges.length < 200; node = walker.nextNode()) {
      var text = node.nodeValue.toLowerCase(), at = text.indexOf(query);
      while (at !== -1 && ranges.length < 200) {
        var range = new Range();
        range.setStart(node, at); range.setEnd(node, at + query.length);
        ranges.push(range);
        at = text.indexOf(query, at + query.length);
      }
    }
    if (ranges.length) { CSS.highlights.set("tarsy-find", new (Function.prototype.bind.apply(Highlight, [null].concat(ranges)))()); }
  }

  function step(by) {
    if (!matches.length) { return; }
    current = (current + by + matches.length) % matches.length;
    markCurrent(true);
  }

  function flush() {
    if (timer) { clearTimeout(timer); timer = null; }
    runFind();
  }

  input.addEventListener("input", function () {
    if (timer) { clearTimeout(timer); }
    timer = setTimeout(function () { timer = null; runFind(); markCurrent(true); }, 60);
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter") {
      event.preventDefault();
      if (timer || input.value.trim().toLowerCase() !== query) { flush(); markCurrent(true); }
      else { step(event.shiftKey ? -1 : 1); }
    } else if (event.key === "Escape") {
      input.value = ""; flush();
    }
  });
  prevButton.addEventListener("click", function () { step(-1); });
  nextButton.addEventListener("click", function () { step(1); });
  onlyBox.addEventListener("change", function () {
    timeline.classList.toggle("find-only", !!query && onlyBox.checked);
  });

  // ---- Live updates -----------------------------------------------------------------
  // Items added or changed: their text is read again, the find counts them, follow
  // mode shows the newest; a lazily loaded tool result is indexed too.
  var refind = null;
  function changed(records, live) {
    var touched = null;
    records.forEach(function (record) {
      if (record.type === "childList") {
        record.addedNodes.forEach(function (node) {
          if (node.nodeType === 1 && (node.matches("article.item") || node.querySelector("article.item"))) {
            items = null;
          }
        });
        record.removedNodes.forEach(function (node) {
          if (node.nodeType === 1 && (node.matches("article.item") || node.querySelector("article.item"))) {
            items = null;
          }
        });
      }
      var target = record.target.nodeType === 1 ? record.target : record.target.parentElement;
      var item = target && target.closest("article.item");
      if (!item && record.addedNodes.length) {
        var added = record.addedNodes[record.addedNodes.length - 1];
        if (added.nodeType === 1) {
          var inside = added.matches("article.item") ? [added] : added.querySelectorAll("article.item");
          item = inside.length ? inside[inside.length - 1] : null;
        }
      }
      if (item) { texts.delete(item); touched = item; }
    });
    if (items === null) { texts.forEach(function (_, item) { if (!item.isConnected) { texts.delete(item); } }); }
    if (live && touched) { newest = touched; }
    if (query && !refind) {
      refind = setTimeout(function () { refind = null; runFind(); }, 150);
    }
  }
  var observer = new MutationObserver(function (records) { changed(records, false); });
  observer.observe(timeline, { childList: true, subtree: true, characterData: true });

  document.addEventListener("tarsy:live-applied", function () {
    changed(observer.takeRecords(), true);
    keepLinked();
    followLink();
    updateControls();
    if (following) { followNow(); }
  });

  window.tarsySession = {
    findTimings: timings,
    find: function (text) { input.value = text; return runFind(); },
    isFollowing: function () { return following; }
  };

  followLink();
  updateControls();
  if (following) { followNow(); }
})();
