"""Ahead-of-time tuning (the room for the tuner, its search spaces and the per-device tuning
database); the call side will read its results, it will drive the runtime to measure them."""
