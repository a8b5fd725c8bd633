#!/usr/bin/env bash
# Installs the Debian packages listed in system-packages.txt that are not installed yet.
# Nothing is done (and apt-get is not even updated) when every package is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
while read -r package; do
  package="${package%%#*}"; package="${package// /}"
  [ -n "$package" ] || continue
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done < system-packages.txt
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "error: missing Debian packages: ${missing[*]} (install them: sudo apt-get install ${missing[*]})" >&2
  exit 2
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
