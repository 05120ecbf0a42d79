"""Builders of federated learning processes, one module per algorithm.

A piece used by one algorithm only lives with it: in its module, or, a
sizeable technique of its own, beside it as `<algorithm>_<piece>`
(`fed_adc_momentum`, `fed_curv_fisher`, `fed_ptr_mtt`, `moon_contrastive`).
"""

from tff_opt.algorithms.fed_opt import build_fed_opt
from tff_opt.algorithms.fed_adc import build_fed_adc
from tff_opt.algorithms.slowmo import build_slowmo
from tff_opt.algorithms.fed_prox import build_fed_prox
from tff_opt.algorithms.fed_for import build_fed_for
from tff_opt.algorithms.fed_curv import build_fed_curv
from tff_opt.algorithms.scaffold import build_scaffold
from tff_opt.algorithms.fed_ptr import build_fed_ptr
from tff_opt.algorithms.fed_dyn import build_fed_dyn
from tff_opt.algorithms.fed_bn import build_fed_bn
from tff_opt.algorithms.fed_dc import build_fed_dc
from tff_opt.algorithms.fed_ntd import build_fed_ntd
from tff_opt.algorithms.fed_rs import build_fed_rs
from tff_opt.algorithms.fed_gkd import build_fed_gkd
from tff_opt.algorithms.moon import build_moon
