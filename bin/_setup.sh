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
  echo "==> installing dependencies (pinned in pyproject.toml)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi
