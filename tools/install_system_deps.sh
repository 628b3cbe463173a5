#!/usr/bin/env bash
# Installs the Debian packages the GPU tests need (onnxc issue 9), idempotently.
#
# What: Mesa's lavapipe Vulkan driver (mesa-vulkan-drivers), the Vulkan loader (libvulkan1) and
# spirv-tools (spirv-val), through apt-get, only when running as root and only those missing.
# Why a script: these are system libraries, not Python packages, so the project's extras cannot
# carry them; README's test command calls this before pip so a fresh machine runs (not skips) the
# Vulkan tests. Not root: it changes nothing, says so, and exits 0; the GPU tests then skip with
# the reason that the Vulkan driver / spirv-val is missing.
set -u

PACKAGES="mesa-vulkan-drivers libvulkan1 spirv-tools"

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  echo "install_system_deps: already installed:$(printf ' %s' $PACKAGES)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get; not installing:$missing (the Vulkan GPU tests will skip: no Vulkan driver/spirv-val)"
  exit 0
fi

if [ "$(id -u)" != "0" ]; then
  echo "install_system_deps: not root; not installing:$missing (the Vulkan GPU tests will skip: no Vulkan driver/spirv-val)"
  exit 0
fi

echo "install_system_deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Update the lists only when a plain install fails (a fresh image may have none or stale ones).
if ! apt-get install -y -q $missing >/tmp/onnxc_install_system_deps.log 2>&1; then
  apt-get update -q >>/tmp/onnxc_install_system_deps.log 2>&1
  if ! apt-get install -y -q $missing >>/tmp/onnxc_install_system_deps.log 2>&1; then
    echo "install_system_deps: apt-get failed (log: /tmp/onnxc_install_system_deps.log); the Vulkan GPU tests will skip"
    exit 0
  fi
fi
echo "install_system_deps: installed:$missing"
