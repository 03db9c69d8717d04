"""`allreduce-bench health`'s decisions, without torch: pairing and re-pairing (pairing.py),
thresholds (reference.py), host states (decide.py), the rounds (rounds.py), verdicts
(verdicts.py), the dry-run plan (plan.py) and the outputs (outputs.py)."""
