#!/bin/sh
# The demo agent: a few lines of shell that use cryo-agent the way a real
# agent (Claude Code, Codex, OpenCode) does in a session: read mail, answer it,
# report, schedule the next wake, hibernate.
mail=$(cryo-agent receive)
if [ "$mail" = "no new messages" ]; then
  cryo-agent send "Session $CRYO_SESSION: all quiet. The time is $(cryo-agent time | cut -d' ' -f1). I will look again in 10 seconds."
else
  said=$(printf '%s\n' "$mail" | grep -v -e '^--- message' -e '^subject:' -e '^(received')
  cryo-agent send --stdin <<REPLY
Thanks, I got your message:

$said

(I am the demo agent, a shell script. A real agent would act on it now.)
REPLY
fi
cryo-agent todo list | grep -q '\[ \] check in' || cryo-agent todo add "check in" --at +10s >/dev/null
cryo-agent hibernate --summary "demo session $CRYO_SESSION"
