# attacks: a shell line that names pytest as a later word to pass as pytest
/bin/sh -c 'pytest; rm -f "$SUITE_VICTIM"'
