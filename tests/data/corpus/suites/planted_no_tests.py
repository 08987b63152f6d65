# attacks: defines no test at all, so the gate would pass on nothing
HELPER = 1
