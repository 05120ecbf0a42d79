"""The four slots of a federated round, and how they are put together.

Every algorithm in this package is one round with four slots filled
differently (the project's `ARCHITECTURE.md`, "The one idea"). The modules
here are those slots' pieces that several algorithms (or the program layer)
share; a piece of one algorithm lives with it in `tff_opt.algorithms`:

| slot | modules |
|---|---|
| broadcast: what the server sends | `distributors` |
| local objective: the loss on a client | `losses` (the pieces of the losses that replace the model's); each penalty lives with its algorithm, in the form `client_work` gives |
| local work: how a client trains | `client_work` (the one local-training loop, with a `LocalObjective` and `ClientPasses`), `vectorized_training` (a group of clients as one computation), `schedules` (client learning-rate decay) |
| report and server update | `aggregators`, `finalizers`, `optimizers` (the server optimizers of Reddi et al., Algorithm 2) |

and what composes them into a process: `composers`
(`compose_learning_process`, a distributor that may read the finalizer's
state), `client_states` (algorithms whose clients keep state) and
`communication` (the bytes each client sends and receives). An algorithm
(`tff_opt.algorithms`) picks one piece per slot, as a recipe that
`tff_opt.algorithms.recipe.assemble` builds and composes.
"""
