"""The server and client optimizers, by their public name.

`tff_opt.optimizers.build_fed_adagrad / build_fed_adam / build_fed_yogi`
are the paper-exact server optimizers of Reddi et al. (Algorithm 2); they
live with the other server-update pieces in `tff_opt.round.optimizers`
and are re-exported here, the name users and notebooks import.
"""

from tff_opt.round.optimizers import build_client_optimizer
from tff_opt.round.optimizers import build_fed_adagrad
from tff_opt.round.optimizers import build_fed_adam
from tff_opt.round.optimizers import build_fed_yogi
from tff_opt.round.optimizers import build_server_optimizer
from tff_opt.round.optimizers import CLIENT_OPTIMIZERS
from tff_opt.round.optimizers import SERVER_OPTIMIZERS

__all__ = [
    'build_client_optimizer', 'build_fed_adagrad', 'build_fed_adam',
    'build_fed_yogi', 'build_server_optimizer', 'CLIENT_OPTIMIZERS',
    'SERVER_OPTIMIZERS',
]
