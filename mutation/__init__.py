"""Mutation testing of trainwatch (``python -m mutation.run``) and its hand-made bugs
(``python -m mutation.known_bugs``); run from the repository root."""
