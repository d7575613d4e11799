"""The soak (``python -m load.soak``): steady churn through the facade for a long time, with
tool calls on real daemons; leaks, typed failures and server RSS over time."""
