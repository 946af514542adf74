// The sessions page's script: Revoke calls DELETE /api/v1/sessions/{id}
// with the session's CSRF token and removes the row. No build step.
"use strict";

(function () {
  const status = document.getElementById("sessions-status");
  let csrf = null;

  async function token() {
    if (csrf === null) {
      const r = await fetch("/api/v1/session", { credentials: "same-origin" });
      const b = await r.json();
      csrf = b.csrfToken || "";
    }
    return csrf;
  }

  document.querySelectorAll("button.revoke").forEach(function (b) {
    b.addEventListener("click", async function () {
      b.disabled = true;
      const r = await fetch("/api/v1/sessions/" + encodeURIComponent(b.dataset.id), {
        method: "DELETE", credentials: "same-origin", headers: { "X-CSRF-Token": await token() },
      });
      if (r.status === 204) {
        b.closest("tr").remove();
        status.textContent = "Session revoked.";
        return;
      }
      let msg = "HTTP " + r.status;
      try { msg = (await r.json()).error.message; } catch (e) { /* not JSON */ }
      status.textContent = "Not revoked: " + msg;
      b.disabled = false;
    });
  });
})();
