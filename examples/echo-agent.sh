#!/bin/sh
# The smallest agent: `baton worker --agent demo -- examples/echo-agent.sh`.
# The task message arrives on stdin; whatever goes to stdout is the result; stderr lines (and
# stdout lines) stream to `baton logs <id>`. Exit non-zero to fail the task.
message=$(cat)
echo "echo-agent: execution $BATON_EXECUTION_ID, attempt $BATON_ATTEMPT, agent $BATON_AGENT, deadline $BATON_DEADLINE" >&2
echo "echo-agent: payload ${BATON_PAYLOAD:-(in file $BATON_PAYLOAD_FILE)}" >&2
case "$message" in
  fail*) echo "echo-agent: asked to fail" >&2; exit 3 ;;
esac
printf 'echo: %s\n' "$message"
