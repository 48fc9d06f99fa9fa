# Sourced by the scripts that need a server program from Debian's packages.
# apt_install_quietly PACKAGE...: installs them as root without starting the
# system-wide service a package would start (the scripts run their own
# throwaway servers). Returns non-zero when it cannot (not root, no apt-get).
apt_install_quietly() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
  fi
  apt-get install -y -qq "$@" >&2 || true
  [ "$created_policy" = 1 ] && rm -f "$policy"
  return 0
}
