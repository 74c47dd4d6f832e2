// The theme toggle in the top bar: system → dark → light → system. "system" stores nothing
// and leaves <html> without data-theme, so the CSS follows prefers-color-scheme. The inline
// script in base.html's <head> applies a stored choice before the first paint.
(function () {
  "use strict";

  var KEY = "tarsy-theme";
  var NEXT = { system: "dark", dark: "light", light: "system" };

  function current() {
    var mode = document.documentElement.getAttribute("data-theme");
    return mode === "light" || mode === "dark" ? mode : "system";
  }

  function store(mode) {
    // Private windows and locked-down browsers may refuse storage: the choice then lasts
    // for this page only.
    try {
      if (mode === "system") { localStorage.removeItem(KEY); } else { localStorage.setItem(KEY, mode); }
    } catch (e) { /* see above */ }
  }

  function show(button, mode) {
    button.textContent = "Theme: " + mode;
    button.setAttribute("aria-label", "Theme: " + mode + " (activate for " + NEXT[mode] + ")");
    button.setAttribute("data-mode", mode);
  }

  var button = document.getElementById("theme-toggle");
  if (!button) { return; }
  show(button, current());
  button.hidden = false;
  button.addEventListener("click", function () {
    var mode = NEXT[current()];
    if (mode === "system") {
      document.documentElement.removeAttribute("data-theme");
    } else {
      document.documentElement.setAttribute("data-theme", mode);
    }
    store(mode);
    show(button, mode);
  });
})();
