#!/usr/bin/env bash
# Set up sweeprl in ./.venv (idempotent; a second run only checks).
#   bash scripts/setup.sh          runtime: CPU torch 2.13.0 + sweeprl (editable)
#   bash scripts/setup.sh --test   the same plus test dependencies and the system packages tests use
#                                  (Debian: ocaml-nox for the OCaml reward, bubblewrap for the sandbox,
#                                  postgresql for the multi-driver tests, chromium for the report's layout test,
#                                  slurm-wlm daemons, munge and mariadb-server for the SLURM tests)
#                                  (model=tiny_ocaml ships with sweeprl: nothing to build)
# Environment: PYTHON (default python3); SWEEPRL_TORCH="skip" keeps a torch you installed yourself
# (e.g. a CUDA build: see README "Install notes"; vLLM: constraints-gpu.txt with the gpu extra).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (allowed: --test)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*" >&2; }

apt_install() {  # packages the tests need; installed with apt-get when missing (root or sudo)
  local missing=()
  command -v ocamlc >/dev/null || missing+=(ocaml-nox)
  command -v bwrap >/dev/null || missing+=(bubblewrap)
  [ -x /usr/bin/python3 ] || missing+=(python3)  # the Python unit-test reward's interpreter in the sandbox
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
  command -v chromium >/dev/null || missing+=(chromium)  # the report is measured in a real browser
  # a SLURM cluster with accounting for the launcher tests (tests/slurm.py)
  command -v slurmctld >/dev/null || missing+=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
  [ ${#missing[@]} -eq 0 ] && return 0
  local SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
      say "missing system packages: ${missing[*]} (install them with your package manager)"; return 1; fi
  fi
  say "installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
}
[ "$want_test" = 1 ] && apt_install

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version 2>&1)"
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade "pip>=24" 2>&1 | grep -v "is ignored" >&2 || true

if [ "${SWEEPRL_TORCH:-}" != "skip" ]; then
  if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
    say "installing torch==2.13.0 (CPU build)"
    "${PIP[@]}" install "torch==2.13.0" 2>&1 | grep -v "is ignored" >&2 || true
  fi
fi

extras=""
[ "$want_test" = 1 ] && extras="[test]"
say "installing sweeprl$extras (editable) with pinned dependencies"
# uv installs the ~150 pinned packages in seconds where pip takes a minute (the same versions: constraints.txt pins
# them all), compiled to bytecode as pip does (without it, every process compiles what it imports where
# PYTHONDONTWRITEBYTECODE is set). pip stays the fallback, and the installer with SWEEPRL_INSTALLER=pip: uv does not
# read pip's configuration, so a package mirror set there is pip's to use.
installed=0
if [ "${SWEEPRL_INSTALLER:-uv}" = uv ]; then
  "${PIP[@]}" install "uv==0.13.8" 2>&1 | grep -v "is ignored" >&2 || true
  if [ -x .venv/bin/uv ] && .venv/bin/uv pip install --python .venv/bin/python -q --compile-bytecode -c constraints.txt -e ".$extras" >&2
  then installed=1; else say "uv could not install them; trying pip"; fi
fi
if [ "$installed" = 0 ]; then
  "${PIP[@]}" install -c constraints.txt -e ".$extras" 2>&1 | grep -v "is ignored" >&2 || true
fi
# one process checks the install and reports the versions (each heavy import costs seconds)
versions=$(.venv/bin/python -c 'import sweeprl, hydra, torch, trl, optuna, mlflow; print(f"torch {torch.__version__}, trl {trl.__version__}, optuna {optuna.__version__}, mlflow {mlflow.__version__}")') \
  || { say "install failed"; exit 1; }
say "ready: $versions"
