#!/usr/bin/env bash
# version.sh OUT: write the header `still --version` reads (the git commit of the tree, "-dirty"
# with uncommitted changes to tracked files); rewritten only when it changes, so builds stay incremental.
set -u
out=$1
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then commit="$commit-dirty"; fi
text="#define STILL_GIT_COMMIT \"$commit\""
if [ "$(cat "$out" 2>/dev/null)" != "$text" ]; then mkdir -p "$(dirname "$out")"; echo "$text" >"$out"; fi
