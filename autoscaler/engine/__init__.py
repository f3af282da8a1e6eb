"""The engine: from query results to decisions, as a pure function of the rule set,
the results, the engine state and the time."""
