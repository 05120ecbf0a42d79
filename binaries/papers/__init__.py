"""Each paper's settings, one module per paper: its tables and its claim.

- `fedopt.py`: Adaptive Federated Optimization (Reddi et al.), Tables 1
  and 11; the claim on Shakespeare.
- `fedfor.py`: FedFOR (Tian, Smith, Kira), Tables 2-5; the claim that its
  gain grows with the local epochs.
- `fedcurv.py`: FedCurv (Shoham et al.), Table 1; the claim of fewer rounds
  to 95/90/85% on two-block MNIST.
- `fedadc.py`: FedADC (Ozfatura et al.), Table I; the claim that it beats
  FedAvg, SlowMo and the other baselines under sort-and-partition.
- `fedptr.py`: FedPTR, Tables 1 and 2; the claim that FedPTR-S beats FedAvg
  and FedProx under per-class Dirichlet.
- `shared.py`: the settings several papers' modules share.

Each module holds its tables as `binaries.tables.TableSpec`s (`SPECS`, in
the paper's order) and its claim as one `binaries.verdicts.Claim`
(`CLAIM`), and imports only that machinery and `shared.py`. The registries
import the modules: `binaries.paper_tables` (`SPECS`, `TABLES`,
`get_table`, what `binaries.reproduce` runs) and `binaries.claims`
(`CLAIMS`).
"""
