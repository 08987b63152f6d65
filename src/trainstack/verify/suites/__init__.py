"""Test-suite gate: suites run in the environment, counted from JUnit XML, reruns, known issues."""
