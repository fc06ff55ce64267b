/* Keyboard shortcuts of the django-jobqueue console (docs/console.md "Keyboard").
 *
 *   /      focus the filter (the first field of form#filters, else the admin's search)
 *   j, k   move to the next / previous row of the page's list (table.jq-table tbody)
 *   Enter  open the current row's first link
 *   r      reload the page
 *   ?      show or hide the help (#jq-help); Esc hides it
 *
 * No shortcut fires while a field has the focus or with Ctrl, Alt or Meta held, so
 * typing and the browser's own shortcuts are untouched. No library, no build step.
 */
(function () {
  "use strict";

  var current = -1;

  function typing(target) {
    if (!target) { return false; }
    var tag = (target.tagName || "").toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  function rows() {
    var table = document.querySelector("table.jq-table[data-jq-list]") ||
      document.querySelector("table.jq-table");
    if (!table) { return []; }
    return Array.prototype.filter.call(table.querySelectorAll("tbody tr"), function (row) {
      return row.querySelector("a, input, button") !== null || row.cells.length > 1;
    });
  }

  function select(index) {
    var list = rows();
    if (!list.length) { return; }
    index = Math.max(0, Math.min(list.length - 1, index));
    if (current >= 0 && list[current]) { list[current].classList.remove("jq-current"); }
    current = index;
    var row = list[current];
    row.classList.add("jq-current");
    row.setAttribute("aria-selected", "true");
    row.scrollIntoView({block: "nearest"});
  }

  function toggleHelp(show) {
    var help = document.getElementById("jq-help");
    if (!help) { return; }
    help.hidden = show === undefined ? !help.hidden : !show;
  }

  function focusFilter() {
    var field = document.querySelector(
      "form#filters input:not([type=hidden]), form#filters select, #searchbar"
    );
    if (field) {
      field.focus();
      if (field.select) { field.select(); }
    }
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey) { return; }
    if (event.key === "Escape") { toggleHelp(false); return; }
    if (typing(event.target)) { return; }
    switch (event.key) {
      case "/":
        event.preventDefault();
        focusFilter();
        break;
      case "j":
        select(current + 1);
        break;
      case "k":
        select(current < 0 ? 0 : current - 1);
        break;
      case "Enter": {
        var list = rows();
        if (current >= 0 && list[current]) {
          var link = list[current].querySelector("a[href]");
          if (link) { event.preventDefault(); window.location.href = link.href; }
        }
        break;
      }
      case "r":
        window.location.reload();
        break;
      case "?":
        toggleHelp();
        break;
      default:
        return;
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var link = document.querySelector("[data-jq-help]");
    if (link) {
      link.addEventListener("click", function (event) {
        event.preventDefault();
        toggleHelp();
      });
    }
  });
}());
