"""Verify a built environment: report, op table, ELF link check, smoke checks, suite gate."""
