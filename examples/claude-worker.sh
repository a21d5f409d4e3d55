#!/bin/sh
# Run Claude Code as a Baton agent: each task's message is the prompt (on stdin), Claude's answer
# is the result, and its output streams to `baton logs <id> -f` while it works.
#
#   npx baton agents create claude --max-parallel 2 --timeout 1800
#   npx baton keys create claude-box --agent claude        # a key that can only run this agent
#   BATON_API_KEY=bt_… examples/claude-worker.sh
#   npx baton run claude "list the TODOs in src/ and suggest an order" --wait
#
# Cancelling (`baton executions cancel <id>`) or hitting the timeout stops Claude's whole process
# group (SIGTERM, then SIGKILL after --kill-grace seconds).
exec npx baton worker --agent "${AGENT:-claude}" --concurrency "${CONCURRENCY:-2}" --kill-grace 10 -- \
  claude -p --output-format text
