#!/usr/bin/env bash
# Print the interpreter pykubelet's venv is made with: CPython 3.12 where the machine has one
# (on PATH, or installed by pyenv), else python3.
#
# Why 3.12: `pykubelet up` forks its services from a process that imported their code, and on
# 3.12 it can mark those objects immortal (services/supervisor/immortal.py), so reading them
# no longer writes their reference counts and their pages stay shared between the services.
# On 3.11 everything works the same, with a larger footprint.
set -uo pipefail

candidates=(python3.12)
if root=$(pyenv root 2>/dev/null) || root="${PYENV_ROOT:-${HOME:-}/.pyenv}"; then
  while IFS= read -r py; do candidates+=("$py"); done < <(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -rV)
fi
for py in "${candidates[@]}"; do
  # The interpreter itself, not a pyenv shim (a shim runs only the versions pyenv has selected).
  if exe=$("$py" -c 'import sys; assert sys.version_info[:2] == (3, 12); print(sys.executable)' 2>/dev/null); then
    echo "$exe"
    exit 0
  fi
done
command -v python3
