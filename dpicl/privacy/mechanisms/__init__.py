"""DP aggregation mechanisms; each module exposes the release and its cost (an event) side by side."""
