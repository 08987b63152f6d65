# attacks: a suite command that is a shell line deleting a file outside: refused without --trust, blocked by the sandbox with it
sh -c 'rm -f "$SUITE_VICTIM"'
