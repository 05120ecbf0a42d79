"""Federated optimization on TensorFlow Federated, as `tff.learning` pieces.

`round` holds the four slots of a federated round (broadcast, local
objective, local work, report and server update), `algorithms` one recipe
per algorithm that fills them and returns a learning process, and `program`
what runs a process (training loop, checkpoints, evaluation, registry,
workers). `checks`, `tff_types` and `layers` sit under all three;
`optimizers` re-exports the server optimizers of `round.optimizers`.
"""
