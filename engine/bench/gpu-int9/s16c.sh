#!/usr/bin/env bash
# Session 16, call c: call b's checks and A/B (s16b.sh) again, after d567941: the drafter's context
# pass is timed apart from the proposal (Drafts::context_seconds: the adaptive length weighs the
# proposal alone) and every padded size of the pass is captured at start-up.
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s16c.sh
exec bash "$(cd "$(dirname "$0")" && pwd)/s16b.sh" "$@"
