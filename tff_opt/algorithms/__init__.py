"""Builders of federated learning processes, one module per algorithm."""

from tff_opt.algorithms.fed_opt import build_fed_opt
