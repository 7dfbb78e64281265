#!/usr/bin/env bash
# Resolve the GPU set — sweeprl[gpu] with constraints-gpu.txt — with pip's resolver, for Linux x86_64 and each
# CPython in PYTHONS, and print the versions it picks. Installs nothing and needs no GPU: pip runs in dry-run
# mode for a target platform (--platform/--python-version, wheels only), so it also works on a CPU machine,
# but it downloads the wheels whose metadata the index does not serve separately (torch, vllm and the NVIDIA
# libraries: several GB per Python version, not cached unless PIP_CHECK_CACHE=1).
#   bash scripts/check_gpu_extra.sh                 # CPython 3.11 and 3.12
#   PYTHONS="3.12" bash scripts/check_gpu_extra.sh
# Environment: PYTHON (default .venv/bin/python, any Python >= 3.11 with pip >= 23), PYTHONS, GLIBC_MINOR (the
# oldest glibc 2.x of the target machines; default 31: vLLM 0.31's llguidance 1.7 has x86_64 wheels for
# manylinux_2_31 only, so the GPU set needs glibc >= 2.31, e.g. Ubuntu 20.04+), RESOLVE_TIMEOUT (seconds per
# Python, default 900: a conflict can send pip's resolver backtracking for a long time), KEEP_PIP_CONFIG=1 to use
# your pip configuration (a mirror); by default pip's own default index is used, so that a local wheel dir or
# mirror cannot change the answer. Exit code: 0 when every Python resolves, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
PYTHONS=${PYTHONS:-"3.11 3.12"}
GLIBC_MINOR=${GLIBC_MINOR:-31}
RESOLVE_TIMEOUT=${RESOLVE_TIMEOUT:-900}
say() { printf '[check_gpu_extra] %s\n' "$*" >&2; }

if [ "${KEEP_PIP_CONFIG:-0}" != 1 ]; then
  export PIP_CONFIG_FILE=/dev/null  # no config file: no extra index, no find-links
  unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX
fi
cache=(--no-cache-dir)
[ "${PIP_CHECK_CACHE:-0}" = 1 ] && cache=()

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wheels only (--only-binary=:all:, which a foreign --platform requires): sweeprl itself as a wheel first
say "building the sweeprl wheel"
"$PY" -m pip wheel -q --no-deps "${cache[@]}" -w "$work" . >&2
wheel=$(ls "$work"/sweeprl-*.whl)

platforms=()
for ((minor = GLIBC_MINOR; minor >= 17; minor--)); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64)  # pip adds manylinux2010 and manylinux1

resolve() {  # $1 = Python version; a dependency published only as an sdist (hydra-core's antlr4 runtime) is
  # built into a pure wheel here and offered with --find-links, then the resolve is retried
  local version=$1 log="$work/pip-$1.log" missing rc
  for _ in 1 2 3 4 5 6; do
    rc=0
    timeout "$RESOLVE_TIMEOUT" "$PY" -m pip install --dry-run --ignore-installed --quiet "${cache[@]}" \
      --only-binary=:all: --find-links "$work/built" "${platforms[@]}" --implementation cp --python-version "$version" \
      -c constraints-gpu.txt --report "$work/report-$version.json" "sweeprl[gpu] @ file://$wheel" >"$log" 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    if [ "$rc" = 124 ]; then
      echo "pip's resolver did not finish within ${RESOLVE_TIMEOUT}s (backtracking)" >>"$log"
      return 1
    fi
    missing=$(sed -n 's/^ERROR: No matching distribution found for \([^ ]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$missing" ] || return 1
    say "  $missing has no wheel: building one from its sdist"
    "$PY" -m pip wheel -q --no-deps "${cache[@]}" -c constraints-gpu.txt -w "$work/built" "$missing" >&2 || return 1
  done
  return 1
}

mkdir -p "$work/built"
status=0
for version in $PYTHONS; do
  report="$work/report-$version.json"
  say "resolving sweeprl[gpu] -c constraints-gpu.txt for CPython $version, manylinux_2_${GLIBC_MINOR}_x86_64"
  if ! resolve "$version"; then
    echo "CPython $version: does NOT resolve"
    tail -n 25 "$work/pip-$version.log"
    status=1
    continue
  fi
  "$PY" - "$report" "$version" <<'EOF'
import json
import re
import sys

report, version = sys.argv[1], sys.argv[2]
install = json.load(open(report))["install"]
picked = {re.sub(r"[-_.]+", "-", it["metadata"]["name"]).lower(): it["metadata"]["version"] for it in install}
shown = ("torch", "vllm", "transformers", "trl", "peft", "tokenizers", "accelerate", "numpy", "huggingface-hub")
print(f"CPython {version}: resolves ({len(picked)} distributions)")
for name in (*shown, "torchvision", "flashinfer-python", "cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"):
    if name in shown or name in picked:
        print(f"  {name:18} {picked.get(name, '-')}")
cuda = [n for n in picked if n.startswith(("nvidia-", "cuda-"))]
print(f"  ({len(cuda)} nvidia-*/cuda-* distributions in all)")
EOF
done
exit $status
