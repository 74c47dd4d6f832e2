# Shared by bin/run and bin/test: create .venv and install TARSy into it when
# pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS="${1:-}"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "TARSy needs Python 3.11 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
STAMP=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ]; then
  echo "==> upgrading pip"
  .venv/bin/python -m pip install --quiet --upgrade pip
  echo "==> installing dependencies (pinned in pyproject.toml; a first install takes a few minutes)"
  # In a terminal pip shows its own progress (a line per package, download bars); in a
  # log (CI) it stays quiet. setuptools announces every editable install with an
  # "Editable installation." notice box, which pip forwards as a warning: it says
  # nothing about TARSy, so it is filtered out.
  progress=(--quiet)
  [ -t 1 ] && progress=(--progress-bar on)
  PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install "${progress[@]}" -e ".${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
  echo "==> dependencies installed"
fi
