"""`allreduce-bench health`: its decisions (pairing, thresholds, rounds, verdicts, outputs) need no torch."""
