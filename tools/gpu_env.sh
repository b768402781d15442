# Source me on an air-gapped GPU machine: installs the wheelhouse (.whl/) into a private
# folder and points PYTHONPATH at it and at src/, and makes `python` exist for the rules.
site=/tmp/repro-site
if [[ -d .whl ]] && ! python3 -c "import snakemake, hydra" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v python >/dev/null; then
  # a wrapper, not a symlink: a symlink to a venv's interpreter starts it without the venv's packages
  mkdir -p /tmp/repro-bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/repro-bin/python
  chmod +x /tmp/repro-bin/python
  export PATH="/tmp/repro-bin:$PATH"
fi
export PYTHONUNBUFFERED=1
