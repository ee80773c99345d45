# Sourced by tests/clients/run.sh and protocol-tests/run.sh: makes sure $ROOT/.cache/venv
# exists and holds tests/clients/requirements.txt (reinstalled when that file changes).
# Needs ROOT; sets VENV. PYTHON picks the interpreter that creates the venv.
VENV="$ROOT/.cache/venv"
if [[ ! -x "$VENV/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
REQ="$ROOT/tests/clients/requirements.txt"
STAMP="$VENV/.requirements.sha"
SUM="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$SUM" ]]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  echo "$SUM" >"$STAMP"
fi
