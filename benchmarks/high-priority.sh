#!/usr/bin/env bash
# Runs a measurement at high priority on a machine shared with other engineers' builds.
#
# `nice -n -15 CMD` does not do that here: the kernel groups processes by session
# (/proc/sys/kernel/sched_autogroup_enabled = 1), and a process's niceness only weighs against
# the processes of its own session; every other engineer's session still gets an equal share of
# the CPU. (Besides, the threads of Swift's concurrency pool start at nice 0 whatever their
# process's niceness.) Seen on 2026-11-27: `nice -n -15 formattest-dev simulate backlog` got
# 42 s of CPU in 234 s of wall time beside four builds. This runs CMD in a session of its own
# (setsid: a new scheduling group, which its children join) and gives that group the niceness
# LEVEL (/proc/PID/autogroup), so that CMD and everything it starts (a server, a load
# generator) weigh as one group at LEVEL against the other sessions, and as equals among
# themselves.
#
# usage: benchmarks/high-priority.sh LEVEL CMD [ARG...]        (root for a negative LEVEL)
set -euo pipefail
level="$1"
shift
# The new session sets its own group's niceness, then becomes CMD (from outside, the write could
# land before setsid ran, on the caller's group).
exec setsid --wait bash -c 'echo "$0" > /proc/self/autogroup || exit 125; exec "$@"' "$level" "$@"
