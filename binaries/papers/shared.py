"""Settings that several papers' tables or claims share.

FedDyn's alpha of the FedFOR, FedADC and FedPTR tables, the local-epochs
template of the FedFOR and FedCurv tables, and the flags the claims' runs
share (each `binaries/papers/<paper>.py`'s `CLAIM`).
"""


# --- The tables --------------------------------------------------------------

# choice: FedDyn's alpha is not given (FedFOR's, FedADC's and FedPTR's
# tables); 0.01, the middle of the grid the FedADC paper searched (0.1,
# 0.01, 0.001).
FEDDYN_ALPHA = 0.01
# The local epochs, a template over a point's variable E.
EPOCHS_FLAG = '--client_epochs={E}'


# --- The claims --------------------------------------------------------------


def task_options(**options) -> tuple[str, ...]:
  """`--task_option=NAME=VALUE` flags, in order."""
  return tuple(f'--task_option={k}={v}' for k, v in options.items())


# Every method names its client weighting (its paper's): the runs must not
# depend on defaults that change.
FEDAVG = ('--algorithm=fedopt', '--server_opt=sgd', '--server_lr=1.0',
          '--client_weighting=num_examples')
UNIFORM = ('--client_weighting=uniform',)
BY_EXAMPLES = ('--client_weighting=num_examples',)
MNIST5K = ('--task=mnist5k',)
