#!/bin/sh
# The browser test drives Debian's chromium (never a downloaded browser build). `make test` runs this first:
# it installs the package when it is missing and this is a root Debian machine; otherwise it says why, and
# the browser test then skips with that reason.
set -u
CHROMIUM="${GATEKIT_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "browser test: $CHROMIUM is missing and this is not a root Debian machine, so it cannot be installed here;" \
         "the browser test will be skipped (apt-get install chromium)" >&2
    exit 0
fi
echo "browser test: installing Debian's chromium with apt-get (once)..." >&2
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt (e.g. a second checkout's `make test`) instead of failing on its lock.
if apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null \
   && apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium fonts-dejavu-core >/dev/null; then
    echo "browser test: installed $("$CHROMIUM" --version 2>/dev/null)" >&2
    exit 0
fi
echo "browser test: apt-get could not install chromium; the browser test will be skipped" >&2
exit 0
