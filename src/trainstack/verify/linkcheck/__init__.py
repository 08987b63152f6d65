"""ELF link check: NEEDED and dlopen'ed libraries resolved the way the dynamic loader would."""
