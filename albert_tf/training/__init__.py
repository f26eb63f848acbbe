"""Training machinery shared by every driver: optimizers, schedule, strategies, the loop."""
