"""kdtree's PyTorch reference engine and the formats it shares with the native engine.

Importing this package is cheap (no torch): the KDTR format, the DDTree algorithms and the
metrics-event contract are usable on machines without a GPU or a model.
"""
