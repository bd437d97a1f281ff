# Sourced by the GPU lease scripts (gpu_session.sh, gpu_curve.sh) after they set TAG, LOG, PY, BUDGET and T0:
# timed log lines, the seconds left of the budget, and the carried wheels installed into one site folder.
say() { echo "[$TAG $(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
install_wheels() {  # install_wheels SITE WHEEL...: then SITE leads PYTHONPATH, after the repository
  local site=$1 w; shift
  local wheels=(); for w in "$@"; do [ -f "$w" ] && wheels+=("$w"); done
  if [ ${#wheels[@]} -gt 0 ]; then
    say "installing carried wheels: ${#wheels[@]}"
    for w in "${wheels[@]}"; do  # one by one: a wheel for another python skips only itself
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$w" \
        >>"$LOG" 2>&1 || say "not installed: $w (see log)"
    done
  fi
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
}
