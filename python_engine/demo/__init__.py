"""`kdtree demo`: DDTree on the shipped demo pair (refs/models/demo-target, demo-drafter),
with the best engine available and an AR baseline measured in the same run."""
