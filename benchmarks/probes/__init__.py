"""One-off probes and profiles: scripts whose answers are recorded in BENCHMARKS.md and
benchmarks/history/; kept to re-ask the question on new hardware."""
