"""The stand-in kcp: a small program behaving as `kcp start` (v0.32.x) does where the operator relies on it.

See docs/design.md#kcp-facts-the-code-relies-on. Run it as `kcpshard-fake-kcp start [kcp flags]`. When
`$KCP_BINARY` names a real kcp binary, callers use that instead (`kcp_binary()`).

Test knobs (environment variables, because a real kcp would reject unknown flags):
- `KCP_FAKE_VERSION` (default `v0.32.1`): the kcp version it claims (`version`, `/version`, bootstrap marker).
- `KCP_FAKE_STARTUP_SECONDS` (default 1.0): delay after serving starts before `/readyz` may turn ok.
- `KCP_FAKE_NEVER_READY=1`: `/readyz` never turns ok.
- `KCP_FAKE_CRASH_AFTER_SECONDS`: exit abruptly (code 2, like a Go panic) that long after start.
- `KCP_FAKE_IGNORE_SIGTERM=1`: SIGTERM/SIGINT are logged and ignored (only SIGKILL stops it).
- `KCP_FAKE_LEASE_DURATION_SECONDS` / `KCP_FAKE_RENEW_DEADLINE_SECONDS` / `KCP_FAKE_RETRY_PERIOD_SECONDS`:
  leader-election timings for tests only (defaults are kcp's 60 / 5 / 2).
- `KCP_FAKE_CONTROLLER_PERIOD_SECONDS` (default 0.2): workspace controller loop period.
- `KCP_FAKE_RETRY_AFTER_HOLD_SECONDS` (default 0): with `--shutdown-send-retry-after`, keep answering 429
  at least that long after the shutdown delay (kube answers 429 only until in-flight requests drain,
  which is usually instant; tests need a window to observe it).
- `KCP_FAKE_WATCH_HOLD_SECONDS` (default 60): without `--shutdown-watch-termination-grace-period` (kcp
  refuses the flag), watches still open when the listener closes are held, silent, up to this long or until
  their clients close them, as kcp's HTTP server does until its shutdown timeout.
- `KCP_FAKE_RSA_BITS` (default 4096): size of the generated `sa.key` (tests may use 2048 to be quicker).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SCRIPT = "kcpshard-fake-kcp"


def binary_path() -> str:
    """Path of the stand-in's console script."""
    beside = Path(sys.executable).parent / SCRIPT
    if beside.is_file():
        return str(beside)
    found = shutil.which(SCRIPT)
    if found is None:
        raise FileNotFoundError(f"{SCRIPT} not found: install the kcpshard package (pip install -e .)")
    return found


def kcp_binary() -> str:
    """The kcp to run: `$KCP_BINARY` when set, else the stand-in."""
    real = os.environ.get("KCP_BINARY", "").strip()
    return real if real else binary_path()
