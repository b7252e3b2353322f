# Shared by scripts/serve and scripts/test: make sure .venv exists and holds this project.
# Re-installs only when pyproject.toml changed since the last install (a stamp file records it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JARVIS_VENV:-$ROOT/.venv}"  # (JARVIS_VENV: another place, for tests of this script)
PY="${PYTHON:-python3}"
extras="${1:-}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Jarvis Gateway needs Python >= 3.11 (found: $("$PY" --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.jarvis-installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  echo "installing jarvis-gateway${extras:+[$extras]} into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  # Current pip shows the build backend's warnings even with --quiet: setuptools' "Editable installation"
  # banner (asterisks and "!!") warns of folders named like the package, which a checkout always has.
  PYTHONWARNINGS="ignore:Editable installation" \
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT${extras:+[$extras]}"
  touch "$stamp"
fi
